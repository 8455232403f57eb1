// Package dialect reads what a tool call means for each audited server:
// which operations it carries (reads, writes, copy plans), their targets and
// idempotency keys, their intents, and what the response says about them.
package dialect

import (
	"strings"
	"unsafe"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/valyala/fastjson"
)

// Dialect names.
const (
	Thegram  = "thegram"
	Oddlynew = "oddlynew"
	Generic  = "generic"
)

// WriteTool names a write tool of a generic server and where its target
// and key are.
type WriteTool struct {
	// TargetArg is the argument holding the document.
	TargetArg string `yaml:"target_arg"`
	// KeyArg is the argument holding the idempotency key, if any.
	KeyArg string `yaml:"key_arg"`
}

// Config chooses the dialect of each server.
type Config struct {
	// Servers maps a server name to its dialect. Names not listed use the
	// built-in default: names starting with thegram or oddlynew get those
	// dialects, every other name the generic one.
	Servers map[string]string `yaml:"servers"`
	// Writes names the write tools of generic servers: server → tool → where
	// its target and key are.
	Writes map[string]map[string]WriteTool `yaml:"writes"`
}

// Validate checks dialect names.
func (c *Config) Validate() error {
	for name, d := range c.Servers {
		switch d {
		case Thegram, Oddlynew, Generic:
		default:
			return &ConfigError{Path: "servers." + name, Reason: "unknown dialect " + d + " (want thegram, oddlynew or generic)"}
		}
	}
	for server, tools := range c.Writes {
		for tool, w := range tools {
			if w.TargetArg == "" {
				return &ConfigError{Path: "writes." + server + "." + tool + ".target_arg", Reason: "required"}
			}
		}
	}
	return nil
}

// ConfigError names the key path of an invalid setting.
type ConfigError struct {
	Path   string
	Reason string
}

func (e *ConfigError) Error() string { return e.Path + ": " + e.Reason }

// Of returns the dialect of a server name.
func (c *Config) Of(server string) string {
	if d, ok := c.Servers[server]; ok {
		return d
	}
	switch {
	case strings.HasPrefix(server, Thegram):
		return Thegram
	case strings.HasPrefix(server, Oddlynew):
		return Oddlynew
	}
	return Generic
}

// Reader reads calls. It is not safe for concurrent use: it reuses its
// parsers and scratch space from one call to the next.
type Reader struct {
	cfg Config
	p   parsers
	// free and freeOp hold the blocks that Recycle gave back, for ReadCopy
	// to fill again instead of allocating.
	free   []*recordCall
	freeOp []*recordCallOp
}

// NewReader returns a Reader for cfg.
func NewReader(cfg Config) *Reader { return &Reader{cfg: cfg} }

// Payload is a call's JSON as its decoder parsed it. A decoder that has
// parsed the call (the capture's record parser, the OTLP span reader)
// hands its values to ReadPayload, which reads them instead of parsing the
// call's text again. The values belong to the decoder's parser: they are
// read before it parses the next call, and the record keeps none of them.
type Payload struct {
	// Args is params.arguments; nil when absent.
	Args *fastjson.Value
	// Result is response.result; nil when absent.
	Result *fastjson.Value
	// ErrorData is response.error.data; nil when absent.
	ErrorData *fastjson.Value
	// CanonicalArgs is the canonical JSON of Args (canon.Append), when the
	// decoder made it for the call's id; nil to have the reader make it
	// when it needs it.
	CanonicalArgs []byte
	// Known is what the decoder knew of the call beside its JSON.
	Known
}

// Known is what a decoder knew of a call beside its JSON, which a reader
// that reads the call's text later (once masked, ReadKnown) is told too:
// with no JSON built for it to parse back.
type Known struct {
	// ErrorDataCode is the code of the error's data when it is known
	// without the data (an OTLP span's error.type); ErrorData's code wins.
	ErrorDataCode string
	// ToolError is set for a call known to have answered with a tool error
	// whose result was not recorded: an OTLP span that records error.type
	// but not the opt-in result.
	ToolError *ToolError
}

// ToolError is a tool error known by its code and message only.
type ToolError struct {
	// Code is the server's error code (E_STORAGE); empty when only the
	// error itself is known (error.type tool_error).
	Code    string
	Message string
}

// Read reads one call into a record, parsing its arguments, result and
// error data. The record keeps c and shares none of the reader's scratch
// space.
func (r *Reader) Read(c *audit.Call) *audit.Record { return r.ReadKnown(c, Known{}) }

// ReadKnown reads one call as Read does, with what its decoder knew of it
// beside its JSON (Result.Known of otlp.Read).
func (r *Reader) ReadKnown(c *audit.Call, k Known) *audit.Record {
	p := Payload{Args: parse(&r.p.args, c.Arguments), Result: parse(&r.p.result, c.Result), Known: k}
	if c.Error != nil {
		p.ErrorData = parse(&r.p.data, c.Error.Data)
	}
	if p.Args == nil && len(c.Arguments) > 0 {
		// Not JSON (a call built by hand): its text stands for itself, as
		// canon.Bytes has it.
		p.CanonicalArgs = c.Arguments
	}
	return r.ReadPayload(c, &p)
}

// ReadPayload reads one call whose JSON its decoder has parsed into p. The
// record keeps c and none of p, nor of the reader's scratch space.
func (r *Reader) ReadPayload(c *audit.Call, p *Payload) *audit.Record {
	return r.read(c, p, false)
}

// ReadCopy reads a copy of c as ReadPayload reads c, the record and its
// call made in one allocation (with the call's operation, for the dialects
// whose calls carry one). A decoder that fills one Call for every call it
// parses hands it here.
func (r *Reader) ReadCopy(c *audit.Call, p *Payload) *audit.Record {
	return r.read(c, p, true)
}

// Blocks allocate a record with its call, its one operation, or both.
type (
	recordOp struct {
		rec audit.Record
		op  [1]audit.Op
	}
	recordCall struct {
		rec  audit.Record
		call audit.Call
	}
	recordCallOp struct {
		rec  audit.Record
		call audit.Call
		op   [1]audit.Op
	}
)

// maxFree bounds the blocks a Reader keeps for reuse: about the calls that
// wait to be judged at once in analyze.
const maxFree = 4096

// Recycle gives back a record that ReadCopy returned, once nothing refers
// to it, its call or its operations any more (detect.Engine.OnJudged), so
// that ReadCopy fills it again instead of allocating one. The strings it
// refers to are not reused. A record that ReadCopy did not make is left
// alone.
func (r *Reader) Recycle(rec *audit.Record) {
	// A block made by ReadCopy holds its call right after its record; any
	// other record's call is elsewhere. The check compares addresses only.
	base := uintptr(unsafe.Pointer(rec))
	if rec == nil || uintptr(unsafe.Pointer(rec.Call)) != base+unsafe.Offsetof(recordCall{}.call) {
		return
	}
	if len(rec.Ops) == 1 && uintptr(unsafe.Pointer(&rec.Ops[0])) == base+unsafe.Offsetof(recordCallOp{}.op) {
		if len(r.freeOp) < maxFree {
			r.freeOp = append(r.freeOp, (*recordCallOp)(unsafe.Pointer(rec)))
		}
		return
	}
	// A record and its call, or a block with its operation unused: the
	// record and call at the head of either are a recordCall.
	if len(r.free) < maxFree {
		r.free = append(r.free, (*recordCall)(unsafe.Pointer(rec)))
	}
}

// read reads c, or a copy of it.
func (r *Reader) read(c *audit.Call, p *Payload, copyCall bool) *audit.Record {
	var rec *audit.Record
	switch d := r.cfg.Of(c.Server); d {
	case Oddlynew:
		// A run carries any number of operations: they get their own.
		var a *audit.Record
		if copyCall {
			var b *recordCall
			if n := len(r.free); n > 0 {
				b = r.free[n-1]
				r.free = r.free[:n-1]
				// The operations of the run it held are dead too.
				r.p.spareOps = b.rec.Ops[:0]
				*b = recordCall{call: *c}
			} else {
				b = &recordCall{call: *c}
			}
			a, c = &b.rec, &b.call
		} else {
			a = &audit.Record{}
		}
		rec = r.oddlynew(a, c, p)
	default:
		// One operation per call.
		var a *audit.Record
		var one *[1]audit.Op
		if copyCall {
			var b *recordCallOp
			if n := len(r.freeOp); n > 0 {
				b = r.freeOp[n-1]
				r.freeOp = r.freeOp[:n-1]
				*b = recordCallOp{call: *c}
			} else {
				b = &recordCallOp{call: *c}
			}
			a, one, c = &b.rec, &b.op, &b.call
		} else {
			b := &recordOp{}
			a, one = &b.rec, &b.op
		}
		if d == Thegram {
			rec = r.thegram(a, one, c, p)
		} else {
			rec = r.generic(a, one, c, p, r.cfg.Writes[c.Server])
		}
	}
	rec.Call = c
	if f := rec.Failure; f != nil && (f.Action == audit.ActionFixInput || f.Action == audit.ActionReauthorize) {
		args := p.CanonicalArgs
		if args == nil && p.Args != nil {
			r.p.canon = canon.Append(r.p.canon[:0], p.Args)
			args = r.p.canon
		}
		rec.RequestHash = canon.Hash([]byte(c.Tool), args)
	}
	return rec
}

// isError reports whether the call answered with a tool error.
func isError(p *Payload) bool { return p.ToolError != nil || p.Result.GetBool("isError") }

// label returns the bounded tool label of a call: its tool when known.
func label(known bool, tool string) string {
	if known {
		return tool
	}
	return "other"
}

// KnownTool reports whether tool is a tool of the dialect; metrics label
// other tools "other".
func KnownTool(dialect, tool string) bool {
	switch dialect {
	case Thegram:
		return strings.HasPrefix(tool, "gram_")
	case Oddlynew:
		return tool == "run" || tool == "guide"
	}
	return false
}

// outcome returns the wire outcome of a call.
func outcome(c *audit.Call, isError bool) audit.Outcome {
	switch {
	case !c.Responded:
		return audit.OutcomeNoResponse
	case c.Error != nil:
		return audit.OutcomeProtocolError
	case isError:
		return audit.OutcomeToolError
	}
	return audit.OutcomeOK
}
