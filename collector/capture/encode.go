package capture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// record is a call record as capture-format.md §1 lays it out, in its
// order: what AppendRecord writes.
type record struct {
	Time           string      `json:"time"`
	DurationMS     json.Number `json:"duration_ms,omitempty"`
	Server         string      `json:"server"`
	Session        string      `json:"session,omitempty"`
	Client         string      `json:"client,omitempty"`
	Tenant         string      `json:"tenant,omitempty"`
	TraceID        string      `json:"trace_id,omitempty"`
	SpanID         string      `json:"span_id,omitempty"`
	Request        request     `json:"request"`
	Response       *response   `json:"response,omitempty"`
	TransportError string      `json:"transport_error,omitempty"`
}

type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  params          `json:"params"`
}

type params struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	// Result is written as null when the response is known to have come
	// but its result was not recorded: the record then reads as the call
	// did (answered, content unknown).
	Result json.RawMessage `json:"result,omitempty"`
	Error  *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// AppendRecord appends r's call to dst as one call record
// (capture-format.md §1) and a newline: the call as it was stored, so that
// reading the record back gives the call its id, its fingerprint and its
// reading again. Payloads are copied as stored, compacted onto one line.
//
// What the store does not keep is not written: the sender's name
// (Call.Source), the JSON-RPC id's type (an id stored as "7" is written as
// the number 7; any other id as a string), members of the request and the
// response other than the ones below, and, for a call that came as an
// OTLP span, what the span said outside its attributes. An OTLP call is
// written as the record it is read as (docs/detection.md, "From calls to
// operations"), with these choices where a span holds less than a record:
//   - no jsonrpc.request.id: no id; the trace_id and span_id, from which
//     the span's call id was taken, give the record the same call id;
//   - error.type a server code, or tool_error, with no recorded result: a
//     result {"isError": true} whose structuredContent.error holds the code
//     and the message the call's reading kept;
//   - E_APP_NOT_RUNNING: the JSON-RPC error -32000 with data {"code":
//     "E_APP_NOT_RUNNING"};
//   - no payload recorded, answered: "result": null.
//
// It fails only on a stored payload that is not JSON.
func AppendRecord(dst []byte, r *audit.Record) ([]byte, error) {
	c := r.Call
	rec := record{
		Time:           c.Time.UTC().Format(time.RFC3339Nano),
		Server:         c.Server,
		Session:        c.Session,
		Client:         c.Client,
		Tenant:         c.Tenant,
		TraceID:        c.TraceID,
		SpanID:         c.SpanID,
		TransportError: c.TransportError,
	}
	if c.Duration > 0 {
		rec.DurationMS = json.Number(strconv.FormatFloat(float64(c.Duration)/float64(time.Millisecond), 'f', -1, 64))
	}
	id := recordID(c)
	rec.Request = request{JSONRPC: "2.0", ID: id, Method: c.Method, Params: params{Name: c.Tool, Arguments: c.Arguments}}
	if rec.Request.Method == "" {
		rec.Request.Method = "tools/call"
	}
	if c.Responded {
		resp := &response{JSONRPC: "2.0", ID: id}
		if resp.ID == nil {
			resp.ID = json.RawMessage("null")
		}
		switch {
		case c.Error != nil:
			resp.Error = &rpcError{Code: c.Error.Code, Message: c.Error.Message, Data: c.Error.Data}
			if c.Error.Data == nil {
				resp.Error.Data = errorDataCode(r)
			}
		case c.Result != nil:
			resp.Result = c.Result
		case r.Outcome == audit.OutcomeToolError:
			resp.Result = toolErrorResult(r)
		default:
			resp.Result = json.RawMessage("null")
		}
		rec.Response = resp
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	// Payloads as they were: a "<" in a document stays "<".
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&rec); err != nil {
		return dst, fmt.Errorf("cannot write call %s as a record: %w", c.ID, err)
	}
	return append(dst, b.Bytes()...), nil
}

// recordID returns the JSON-RPC id of c as JSON: a number when its text is
// one (the text is what the decoders keep, and a number's text reads back
// as itself), else a string; nil when c has none. A call without one that
// names its span (an OTLP span without jsonrpc.request.id) is written
// without one too: its trace_id and span_id give it its call id again
// (audit.IdentityRPC), as they gave the span's.
func recordID(c *audit.Call) json.RawMessage {
	if c.RPCID == "" {
		return nil
	}
	if isNumber(c.RPCID) {
		return json.RawMessage(c.RPCID)
	}
	b, _ := json.Marshal(c.RPCID) // a string always marshals
	return b
}

// isNumber reports whether s is a JSON number.
func isNumber(s string) bool {
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return false
	}
	return json.Valid([]byte(s))
}

// toolErrorResult returns the result of a call known to have answered
// with a tool error that was not recorded (an OTLP span's error.type):
// isError, and the code and message its reading kept.
func toolErrorResult(r *audit.Record) json.RawMessage {
	code, msg := "", ""
	if f := r.Failure; f != nil {
		code, msg = f.Code, f.Message
	}
	if r.Dialect == dialect.Generic && code == "tool_error" {
		code = "" // the generic reading's name for a tool error without a code
	}
	if r.Dialect == dialect.Oddlynew {
		code = "" // Oddlynew's errors are messages; the code was read from it
	}
	if code == "" && msg == "" {
		return json.RawMessage(`{"isError":true}`)
	}
	type errorObject struct {
		Code    string `json:"code,omitempty"`
		Message string `json:"message,omitempty"`
	}
	b, _ := json.Marshal(map[string]any{"isError": true, "structuredContent": map[string]any{"error": errorObject{code, msg}}})
	return b
}

// errorDataCode returns the data of a JSON-RPC error whose code its
// reading took from outside the error (an OTLP span's error.type
// E_APP_NOT_RUNNING): {"code": ...}; nil when the error's own code gives
// the reading's.
func errorDataCode(r *audit.Record) json.RawMessage {
	f, e := r.Failure, r.Call.Error
	if f == nil || f.Code == "" || f.Code == strconv.FormatInt(e.Code, 10) {
		return nil
	}
	b, _ := json.Marshal(map[string]string{"code": f.Code})
	return b
}
