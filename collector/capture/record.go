package capture

import (
	"fmt"
	"strconv"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/valyala/fastjson"
)

// RecordError says why one call record was rejected.
type RecordError struct {
	Source string // file name or "-"
	Line   int    // 1-based line (NDJSON) or element (JSON array); 0 if unknown
	Field  string // the offending field, empty when the record is not JSON
	Reason string
}

func (e *RecordError) Error() string {
	loc := e.Source
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: field %s: %s", loc, e.Field, e.Reason)
	}
	return loc + ": " + e.Reason
}

// RecordParser parses call records. It reuses its buffers: a parser is not
// safe for concurrent use, and the Call it returns does not alias data.
type RecordParser struct {
	p   fastjson.Parser
	buf []byte
}

// Parse parses one call record (capture-format.md §1). The returned error,
// if any, is a *RecordError naming the field and the reason.
func (rp *RecordParser) Parse(data []byte, source string, line int) (*audit.Call, error) {
	bad := func(field, format string, args ...any) error {
		return &RecordError{Source: source, Line: line, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	v, err := rp.p.ParseBytes(data)
	if err != nil {
		return nil, bad("", "not JSON: %v", err)
	}
	if v.Type() != fastjson.TypeObject {
		return nil, bad("", "a call record must be a JSON object, not %s", v.Type())
	}
	c := &audit.Call{Source: source + ":" + strconv.Itoa(line)}

	tv := v.Get("time")
	if tv == nil {
		return nil, bad("time", "missing")
	}
	ts, err := tv.StringBytes()
	if err != nil {
		return nil, bad("time", "must be an RFC 3339 string")
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return nil, bad("time", "not an RFC 3339 time: %q", ts)
	}
	c.Time = t.UTC().Round(time.Microsecond)

	if c.Server, err = optString(v, "server"); err != nil {
		return nil, bad("server", "%v", err)
	}
	if c.Server == "" {
		return nil, bad("server", "missing")
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"session", &c.Session}, {"client", &c.Client}, {"tenant", &c.Tenant},
		{"trace_id", &c.TraceID}, {"span_id", &c.SpanID}, {"transport_error", &c.TransportError}} {
		if *f.dst, err = optString(v, f.name); err != nil {
			return nil, bad(f.name, "%v", err)
		}
	}
	if d := v.Get("duration_ms"); d != nil && d.Type() != fastjson.TypeNull {
		ms, err := d.Float64()
		if err != nil || ms < 0 {
			return nil, bad("duration_ms", "must be a non-negative number")
		}
		c.Duration = time.Duration(ms * float64(time.Millisecond))
	}

	req := v.Get("request")
	if req == nil {
		return nil, bad("request", "missing")
	}
	if req.Type() != fastjson.TypeObject {
		return nil, bad("request", "must be a JSON-RPC request object")
	}
	c.RPCID = rpcID(req.Get("id"))
	c.Method = string(req.GetStringBytes("method"))
	if c.Method == "" {
		c.Method = "tools/call"
	}
	if params := req.Get("params"); params != nil {
		c.Tool = string(params.GetStringBytes("name"))
		if args := params.Get("arguments"); args != nil && args.Type() != fastjson.TypeNull {
			c.Arguments = args.MarshalTo(nil)
		}
	}
	if c.Method == "tools/call" && c.Tool == "" {
		return nil, bad("request.params.name", "missing tool name")
	}

	if resp := v.Get("response"); resp != nil && resp.Type() != fastjson.TypeNull {
		if resp.Type() != fastjson.TypeObject {
			return nil, bad("response", "must be a JSON-RPC response object")
		}
		c.Responded = true
		if e := resp.Get("error"); e != nil && e.Type() != fastjson.TypeNull {
			if e.Type() != fastjson.TypeObject {
				return nil, bad("response.error", "must be an object")
			}
			re := &audit.RPCError{Message: string(e.GetStringBytes("message"))}
			if cv := e.Get("code"); cv != nil {
				code, err := cv.Int64()
				if err != nil {
					return nil, bad("response.error.code", "must be an integer")
				}
				re.Code = code
			}
			if d := e.Get("data"); d != nil && d.Type() != fastjson.TypeNull {
				re.Data = d.MarshalTo(nil)
			}
			c.Error = re
		} else if r := resp.Get("result"); r != nil && r.Type() != fastjson.TypeNull {
			c.Result = r.MarshalTo(nil)
		}
	}
	rp.buf = rp.buf[:0]
	if c.Arguments != nil {
		rp.buf = canon.Append(rp.buf, req.Get("params", "arguments"))
	}
	c.ID = audit.StableID(c.Server, c.Session, c.RPCID, c.Time, c.Tool, rp.buf)
	c.Fingerprint = audit.Fingerprint(c.Server, c.Session, c.RPCID, c.Tool, rp.buf)
	return c, nil
}

func optString(v *fastjson.Value, key string) (string, error) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return "", nil
	}
	b, err := f.StringBytes()
	if err != nil {
		return "", fmt.Errorf("must be a string, not %s", f.Type())
	}
	return string(b), nil
}

// rpcID renders a JSON-RPC id as text: numbers by their text, strings as
// they are, so that OTLP's string attribute and the record's number agree.
func rpcID(v *fastjson.Value) string {
	if v == nil {
		return ""
	}
	switch v.Type() {
	case fastjson.TypeString:
		return string(v.GetStringBytes())
	case fastjson.TypeNull:
		return ""
	}
	return string(v.MarshalTo(nil))
}
