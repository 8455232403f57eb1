package capture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
)

// TestRecord_NameGivenTwice: a record that gives a name twice (at the top,
// in request, params, arguments, result) is read as the MCP SDKs read it,
// the last copy, by every reader: its fields, its call id and fingerprint
// (canonical arguments), the dialect's reading and the payloads kept are
// those of the record that holds only the last copies (as encoding/json
// rewrites it). It is kept, with a warning naming the line, the field and
// the byte offset of the copy read. Until rec50 the fields and the reading
// took the first copy and the canonical arguments the last.
func TestRecord_NameGivenTwice(t *testing.T) {
	const head = `{"time":"2026-11-02T09:00:00Z","server":"thegram","session":"s-1",`
	patch := `"params":{"name":"gram_patch","arguments":{"path":"a.gram","base_revision":3,"request_id":"r-1","operations":[{"op":"append_block","text":"x"}]}}`
	ok := `"response":{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{"path":"a.gram","rev":4,"hash":"h4"}}}`
	f := func(name, record, field string) {
		t.Run(name, func(t *testing.T) {
			var m any
			if err := json.Unmarshal([]byte(record), &m); err != nil {
				t.Fatal(err)
			}
			last, _ := json.Marshal(m)
			got, want := readAll(t, []byte(record)), readAll(t, last)
			if len(got) != 1 || len(want) != 1 {
				t.Fatalf("%d and %d calls read, want 1", len(got), len(want))
			}
			if g, w := reading(got[0]), reading(want[0]); g != w {
				t.Errorf("record %s read\n %s\nits last copies %s read\n %s", record, g, last, w)
			}
			if g, w := got[0].Call, want[0].Call; !bytes.Equal(canon.Bytes(g.Arguments), canon.Bytes(w.Arguments)) || !bytes.Equal(canon.Bytes(g.Result), canon.Bytes(w.Result)) || g.RespSum != w.RespSum {
				t.Errorf("payloads %s %s, want %s %s", g.Arguments, g.Result, w.Arguments, w.Result)
			}
			dec, err := NewDecoder(strings.NewReader("\n"+record+"\n"+record), "in")
			if err != nil {
				t.Fatal(err)
			}
			for {
				if _, err := dec.Next(); err != nil {
					break
				}
			}
			ws := dec.Warnings()
			if len(ws) != 1 || ws[0].Kind != WarnDuplicateName || ws[0].Field != field || ws[0].Line != 2 {
				t.Fatalf("warnings %+v, want one of %s for %s on line 2", ws, WarnDuplicateName, field)
			}
			if at := ws[0].Offset; at < 0 || !strings.HasPrefix(record[at:], `"`) || !strings.Contains(ws[0].Error(), fmt.Sprintf("in:2: field %s at byte offset %d: name given twice", field, at)) {
				t.Errorf("warning %q: offset %d at %.20q", ws[0].Error(), at, record[max(at, 0):])
			}
			if n := dec.WarnCounts()[WarnDuplicateName]; n != 2 {
				t.Errorf("counted %d warnings of two records, want 2", n)
			}
		})
	}
	f("id", head+`"request":{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call",`+patch+`},`+ok+`}`, "request.id")
	f("session", head+`"session":"s-2","request":{"jsonrpc":"2.0","id":1,"method":"tools/call",`+patch+`},`+ok+`}`, "session")
	f("tool", head+`"request":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_read","name":"gram_patch","arguments":{"path":"a.gram","request_id":"r-1"}}},`+ok+`}`, "request.params.name")
	f("argument", head+`"request":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"a.gram","request_id":"r-1","request_id":"r-2","operations":[]}}},`+ok+`}`, "request.params.arguments.request_id")
	f("escaped_argument", head+`"request":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"a.gram","p\u0061th":"b.gram","request_id":"r-1"}}},`+ok+`}`, "request.params.arguments.path")
	f("arguments", head+`"request":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"b.gram"},"arguments":{"path":"a.gram","request_id":"r-1"}}},`+ok+`}`, "request.params.arguments")
	f("result_error", head+`"request":{"jsonrpc":"2.0","id":1,"method":"tools/call",`+patch+`},"response":{"result":{"isError":true,"structuredContent":{"path":"a.gram","rev":4},"isError":false}}}`, "response.result.isError")
	f("response", head+`"request":{"jsonrpc":"2.0","id":1,"method":"tools/call",`+patch+`},"transport_error":"timeout","response":{"result":{}},"response":null}`, "response")
}

// TestRecord_WrongTypes: members of the wrong type are read as they were
// before rec50 (the record kept, each read as the table says) and named
// in a warning with the line, the field and the type found, once per field
// per input, every one counted.
func TestRecord_WrongTypes(t *testing.T) {
	const head = `{"time":"2026-11-02T09:00:00Z","server":"thegram","session":"s-1","request":{"jsonrpc":"2.0",`
	f := func(name, record, kind, field, found string, check func(t *testing.T, r *audit.Record)) {
		t.Run(name, func(t *testing.T) {
			dec, err := NewDecoder(strings.NewReader(record+"\n"+record+"\n"), "in")
			if err != nil {
				t.Fatal(err)
			}
			var recs []*audit.Record
			for {
				r, err := dec.NextRecord(nil)
				if err != nil {
					if IsReject(err) {
						t.Fatalf("rejected: %v", err)
					}
					break
				}
				recs = append(recs, r)
			}
			if len(recs) != 2 {
				t.Fatalf("%d records kept, want 2", len(recs))
			}
			check(t, readAll(t, []byte(record))[0])
			ws := dec.Warnings()
			if len(ws) != 1 || ws[0].Kind != kind || ws[0].Field != field || ws[0].Line != 1 || !strings.Contains(ws[0].Reason, found) {
				t.Fatalf("warnings %+v, want one %s of %s (%s) on line 1", ws, kind, field, found)
			}
			if ws[0].Offset < 0 {
				t.Errorf("warning %s without its offset", ws[0].Error())
			}
			if n := dec.WarnCounts()[kind]; n != 2 {
				t.Errorf("counted %d %s of two records, want 2", n, kind)
			}
		})
	}
	read := `"params":{"name":"gram_read","arguments":{"path":"a.gram"}}}`
	f("method", head+`"id":1,"method":5,`+read+`,"response":{"result":{}}}`, WarnWrongTypeMethod, "request.method", "a number",
		func(t *testing.T, r *audit.Record) {
			if r.Call.Method != "tools/call" || r.Call.Tool != "gram_read" {
				t.Errorf("method %q tool %q, want tools/call gram_read", r.Call.Method, r.Call.Tool)
			}
		})
	f("id_object", head+`"id":{"n":1},"method":"tools/call",`+read+`,"response":{"result":{}}}`, WarnWrongTypeID, "request.id", "an object",
		func(t *testing.T, r *audit.Record) {
			if r.Call.RPCID != `{"n":1}` {
				t.Errorf("JSON-RPC id %q, want its JSON text", r.Call.RPCID)
			}
		})
	f("id_bool", head+`"id":true,"method":"tools/call",`+read+`}`, WarnWrongTypeID, "request.id", "a boolean",
		func(t *testing.T, r *audit.Record) {
			if r.Call.RPCID != `true` || r.Outcome != audit.OutcomeNoResponse {
				t.Errorf("JSON-RPC id %q outcome %s, want true no_response", r.Call.RPCID, r.Outcome)
			}
		})
	f("arguments_string", head+`"id":1,"method":"tools/call","params":{"name":"gram_patch","arguments":"path=a.gram"}},"response":{"result":{"isError":true}}}`,
		WarnWrongTypeArguments, "request.params.arguments", "a string",
		func(t *testing.T, r *audit.Record) {
			if string(r.Call.Arguments) != `"path=a.gram"` || r.Outcome != audit.OutcomeToolError || len(r.Ops) != 1 || r.Ops[0].Target != "" {
				t.Errorf("arguments %s outcome %s ops %+v, want kept as sent, a tool error, one write without a target", r.Call.Arguments, r.Outcome, r.Ops)
			}
		})
	f("arguments_array", head+`"id":1,"method":"tools/call","params":{"name":"gram_read","arguments":[1]}},"response":{"result":{}}}`,
		WarnWrongTypeArguments, "request.params.arguments", "an array",
		func(t *testing.T, r *audit.Record) {
			if string(r.Call.Arguments) != `[1]` {
				t.Errorf("arguments %s, want [1]", r.Call.Arguments)
			}
		})
	f("result_array", head+`"id":1,"method":"tools/call",`+read+`,"response":{"result":[1]}}`, WarnWrongTypeResult, "response.result", "an array",
		func(t *testing.T, r *audit.Record) {
			if string(r.Call.Result) != `[1]` || r.Outcome != audit.OutcomeOK {
				t.Errorf("result %s outcome %s, want [1] ok", r.Call.Result, r.Outcome)
			}
		})
	f("is_error_string", head+`"id":1,"method":"tools/call",`+read+`,"response":{"result":{"isError":"true"}}}`, WarnWrongTypeIsError, "response.result.isError", "a string",
		func(t *testing.T, r *audit.Record) {
			if r.Outcome != audit.OutcomeOK {
				t.Errorf("outcome %s, want ok (isError read as false)", r.Outcome)
			}
		})
	// Null is read as absent, and is no warning.
	dec, err := NewDecoder(strings.NewReader(head+`"id":null,"method":null,"params":{"name":"gram_read","arguments":null}},"response":{"result":{"isError":null}}}`), "in")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dec.Next(); err != nil || len(dec.Warnings()) != 0 {
		t.Errorf("nulls: %v, warnings %+v", err, dec.Warnings())
	}
}
