package tap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Kind is what a JSON-RPC message is.
type Kind uint8

// Message kinds.
const (
	KindRequest      Kind = iota + 1 // has a method and an id
	KindNotification                 // has a method and no id
	KindResponse                     // has an id and a result or an error
)

// Message is one JSON-RPC message taken from a body, an event or a line.
type Message struct {
	Kind Kind
	// ID is the request id as its JSON text (`7`, `"abc"`), so that 7 and
	// "7" stay apart; empty for notifications.
	ID     string
	Method string
	// Params is the raw params of a request or notification.
	Params json.RawMessage
	// Raw is the whole message, compact JSON.
	Raw []byte
}

// wire is the union of the JSON-RPC message shapes.
type wire struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// ErrNotJSONRPC is returned by Parse for JSON that holds no JSON-RPC message.
var ErrNotJSONRPC = errors.New("not a JSON-RPC message")

// Parse splits data into JSON-RPC messages: one message, or the elements of
// a batch in order. A batch element that is not a message is skipped and
// reported in the error, with the others still returned.
func Parse(data []byte) ([]Message, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("cannot parse message: %w: empty", ErrNotJSONRPC)
	}
	if data[0] != '[' {
		m, err := parseOne(data)
		if err != nil {
			return nil, err
		}
		return []Message{m}, nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(data, &elems); err != nil {
		return nil, fmt.Errorf("cannot parse batch: %w", err)
	}
	msgs := make([]Message, 0, len(elems))
	var errs []error
	for i, e := range elems {
		m, err := parseOne(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("batch element %d: %w", i, err))
			continue
		}
		msgs = append(msgs, m)
	}
	return msgs, errors.Join(errs...)
}

func parseOne(data []byte) (Message, error) {
	var w wire
	if err := json.Unmarshal(data, &w); err != nil {
		return Message{}, fmt.Errorf("cannot parse message: %w", err)
	}
	var buf bytes.Buffer
	buf.Grow(len(data))
	if err := json.Compact(&buf, data); err != nil {
		return Message{}, fmt.Errorf("cannot parse message: %w", err)
	}
	m := Message{Method: w.Method, Params: w.Params, Raw: buf.Bytes()}
	if id := bytes.TrimSpace(w.ID); len(id) > 0 && !bytes.Equal(id, []byte("null")) {
		m.ID = string(id)
	}
	switch {
	case w.Method != "" && m.ID != "":
		m.Kind = KindRequest
	case w.Method != "":
		m.Kind = KindNotification
	case m.ID != "" && (w.Result != nil || w.Error != nil):
		m.Kind = KindResponse
	default:
		return Message{}, fmt.Errorf("cannot parse message: %w: neither a method nor an id with a result or error", ErrNotJSONRPC)
	}
	return m, nil
}

// clientInfo returns "name/version" from initialize params, or "".
func clientInfo(params json.RawMessage) string {
	var p struct {
		ClientInfo struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"clientInfo"`
	}
	if json.Unmarshal(params, &p) != nil || p.ClientInfo.Name == "" {
		return ""
	}
	if p.ClientInfo.Version == "" {
		return p.ClientInfo.Name
	}
	return p.ClientInfo.Name + "/" + p.ClientInfo.Version
}

// metaClient returns "name/version" from the per-request clientInfo of
// protocol versions without sessions (params._meta
// "io.modelcontextprotocol/clientInfo"), or "".
func metaClient(params json.RawMessage) string {
	if !bytes.Contains(params, []byte(metaClientInfo)) {
		return ""
	}
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil || p.Meta[metaClientInfo] == nil {
		return ""
	}
	return clientInfo(append(append([]byte(`{"clientInfo":`), p.Meta[metaClientInfo]...), '}'))
}

const metaClientInfo = "io.modelcontextprotocol/clientInfo"

// ClientInfo returns the client of an initialize request as "name/version",
// or "" when m is not one or names no client.
func ClientInfo(m *Message) string {
	if m.Kind != KindRequest || m.Method != "initialize" {
		return ""
	}
	return clientInfo(m.Params)
}

// cancelledID returns the JSON text of the requestId a
// notifications/cancelled names, or "".
func cancelledID(params json.RawMessage) string {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	return string(bytes.TrimSpace(p.RequestID))
}

// ResponseID reads the id of a JSON-RPC response from the first bytes of a
// message too large to keep whole: the id member is taken when it comes
// before the result or error member (as every serializer we know writes
// it: jsonrpc, id, result, or the keys sorted). ok is false when it cannot
// be read; other is true when prefix is known to be no response (a
// request or notification: a method member first, or no object).
func ResponseID(prefix []byte) (id string, ok, other bool) {
	d := json.NewDecoder(bytes.NewReader(prefix))
	t, err := d.Token()
	if err != nil {
		return "", false, false
	}
	if t != json.Delim('{') {
		// A batch may hold responses; anything else is no message.
		return "", false, t != json.Delim('[')
	}
	for {
		t, err := d.Token()
		if err != nil {
			return "", false, false
		}
		name, isName := t.(string)
		if !isName {
			return "", false, false
		}
		switch name {
		case "result", "error":
			return id, id != "", false
		case "method":
			return "", false, true
		case "id":
			var raw json.RawMessage
			if d.Decode(&raw) != nil {
				return "", false, false
			}
			if v := bytes.TrimSpace(raw); len(v) > 0 && !bytes.Equal(v, []byte("null")) {
				id = string(v)
			}
		default:
			var skip json.RawMessage
			if d.Decode(&skip) != nil {
				return "", false, false
			}
		}
	}
}
