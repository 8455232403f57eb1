package tap

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// Transport errors a Record may carry. Other values are free text.
const (
	// ErrTimeout: no response within the relay's response timeout.
	ErrTimeout = "timeout"
	// ErrConnectionReset: the upstream connection or process failed before the response.
	ErrConnectionReset = "connection_reset"
	// ErrCanceled: the client went away or cancelled the request.
	ErrCanceled = "canceled"
	// ErrNotSent: the relay knows the request never reached the server
	// (no upstream connection was made, or the stdio child was gone before
	// any byte of the request was written): the call was not applied.
	ErrNotSent = "not_sent"
)

// Record is one tools/call exchange as the relay saw it: one call record.
type Record struct {
	// Time is when the relay received the request.
	Time time.Time
	// Duration runs until the response, or the transport error, was seen.
	Duration time.Duration
	// DurationUnknown leaves duration_ms out of the JSON (the capture
	// format makes it optional): the record of a call in flight, written
	// to the journal before its end, of a relay that may die before it.
	DurationUnknown bool
	Server          string
	Session         string
	// Client is name/version from the session's initialize clientInfo.
	Client string
	// Request is the JSON-RPC request, compact JSON.
	Request []byte
	// Response is the JSON-RPC response, compact JSON; nil when none arrived.
	Response []byte
	// TransportError says why no response arrived; empty when one did, or
	// when the relay stopped before it could know.
	TransportError string
	// Entry is the request's entry in the Recorder's journal, to end once
	// the record is buffered; 0 without a journal. It is not written.
	Entry uint64
}

// AppendJSON appends r as one line of NDJSON, without the newline.
func (r *Record) AppendJSON(b []byte) []byte {
	b = append(b, `{"time":"`...)
	b = r.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if !r.DurationUnknown {
		b = append(b, `,"duration_ms":`...)
		b = strconv.AppendFloat(b, float64(r.Duration.Microseconds())/1000, 'f', -1, 64)
	}
	b = appendField(b, "server", r.Server)
	if r.Session != "" {
		b = appendField(b, "session", r.Session)
	}
	if r.Client != "" {
		b = appendField(b, "client", r.Client)
	}
	b = append(b, `,"request":`...)
	b = append(b, r.Request...)
	if r.Response != nil {
		b = append(b, `,"response":`...)
		b = append(b, r.Response...)
	}
	if r.TransportError != "" {
		b = appendField(b, "transport_error", r.TransportError)
	}
	return append(b, '}')
}

func appendField(b []byte, name, value string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	q, _ := json.Marshal(value) // a string always marshals
	return append(b, q...)
}

// Outcome says how the exchange ended, as the collector will count it.
func (r *Record) Outcome() audit.Outcome {
	if r.Response == nil {
		return audit.OutcomeNoResponse
	}
	var resp struct {
		Result *struct {
			IsError bool `json:"isError"`
		} `json:"result"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(r.Response, &resp) != nil || resp.Error != nil {
		return audit.OutcomeProtocolError
	}
	if resp.Result != nil && resp.Result.IsError {
		return audit.OutcomeToolError
	}
	return audit.OutcomeOK
}
