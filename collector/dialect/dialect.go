// Package dialect reads what a tool call means for each audited server:
// which operations it carries (reads, writes, copy plans), their targets and
// idempotency keys, their intents, and what the response says about them.
package dialect

import (
	"slices"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// Dialect names.
const (
	Thegram  = "thegram"
	Oddlynew = "oddlynew"
	Generic  = "generic"
)

// Op is one audited operation: a Thegram tool call, or one provider call
// inside an Oddlynew run.
type Op struct {
	Seq  int
	Tool string
	Kind audit.OpKind
	// Target is the document: a Thegram path or an Oddlynew documentId.
	Target string
	// Key is the idempotency key and KeyKind its name (request_id,
	// creationId, copyId, operationId).
	Key     string
	KeyKind string
	// Intent fingerprints what the operation does, for double-apply checks:
	// equal intents are "the same edit". Empty when not comparable.
	Intent string
	// Binding fingerprints everything the idempotency key binds; two
	// bindings under one key are a key reuse.
	Binding string
	// Identity fingerprints a create's identity (title and type) regardless
	// of its key, for duplicate creates and blind re-creates.
	Identity string
	// KeyProtected: re-sending with the same key is a replay, never a
	// second application (gram_patch, createDocument with creationId,
	// applyDocumentCopy).
	KeyProtected bool
	// Protected: re-sending can never apply twice, whatever the key
	// (gram_create, archiveDocument, restoreDocument).
	Protected bool
	Status    audit.OpStatus
	// Failure classifies a failed or uncertain operation.
	Failure *audit.Failure
	// Reason is why an accepted or uncertain write is not yet durable.
	Reason audit.Reason
	// Pending is set on accepted writes whose durability still needs proof
	// (sync not confirmed, save blocked).
	Pending bool

	// What the response tells.
	HasBaseRev bool
	BaseRev    int64
	Rev        int64 // revision reported by the response, 0 if none
	Sync       string
	SaveState  string
	Replayed   bool
	// Create results (Oddlynew).
	Action     string // created | alreadyBootstrapped
	DocumentID string
	// Reads that find corruption.
	JournalCorrupt bool
	// Copy receipts.
	CopyState  string
	NextAction string
	RetryAfter time.Time
}

// Analysis is what a dialect made of one call.
type Analysis struct {
	Dialect string
	Outcome audit.Outcome
	// Failure classifies the call as a whole; nil on success.
	Failure *audit.Failure
	// Known is false when the dialect does not know the tool.
	Known bool
	Ops   []Op
}

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

// Reader analyzes calls. It is not safe for concurrent use.
type Reader struct {
	cfg Config
	p   parsers
	ops []Op // where the next analysis appends its operations
}

// NewReader returns a Reader for cfg.
func NewReader(cfg Config) *Reader { return &Reader{cfg: cfg} }

// Analyze reads one call.
func (r *Reader) Analyze(c *audit.Call) Analysis { return r.AnalyzeAppend(c, nil) }

// AnalyzeAppend is Analyze with the operations appended to ops[:0], so that
// a caller that is done with one analysis before the next can reuse the
// storage of its operations.
func (r *Reader) AnalyzeAppend(c *audit.Call, ops []Op) Analysis {
	r.ops = ops[:0]
	switch d := r.cfg.Of(c.Server); d {
	case Thegram:
		return r.thegram(c)
	case Oddlynew:
		return r.oddlynew(c)
	default:
		return r.generic(c, r.cfg.Writes[c.Server])
	}
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

// Record reads a call into what a store keeps of it; it needs no
// correlation state, so ingest can do it before the call is acknowledged.
func (r *Reader) Record(c *audit.Call) audit.CallRecord {
	a := r.Analyze(c)
	rec := audit.CallRecord{Call: c, Outcome: a.Outcome, Tool: "other", Failure: a.Failure}
	if a.Known {
		rec.Tool = c.Tool
	}
	for i := range a.Ops {
		for _, d := range []string{a.Ops[i].Target, a.Ops[i].DocumentID} {
			if d != "" && !slices.Contains(rec.Documents, d) {
				rec.Documents = append(rec.Documents, d)
			}
		}
	}
	return rec
}
