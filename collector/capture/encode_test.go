package capture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// readAll decodes every call of data, payloads kept, read by a dialect
// reader with the built-in dialects.
func readAll(t *testing.T, data []byte) []*audit.Record {
	t.Helper()
	dec, err := NewDecoder(bytes.NewReader(data), "in")
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	rd := dialect.NewReader(dialect.Config{Writes: map[string]map[string]dialect.WriteTool{
		"notes-mcp": {"save_note": {TargetArg: "path", KeyArg: "idempotency_key"}}}})
	var out []*audit.Record
	for {
		r, err := dec.NextRecord(rd)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
}

// reading is what the detector takes of a record: its call's identity and
// the dialect's reading, without the place it was read from.
func reading(r *audit.Record) string {
	c := *r.Call
	c.Source, c.RespSum, c.Arguments, c.Result = "", 0, nil, nil
	if c.Error != nil {
		e := *c.Error
		e.Data = nil
		c.Error = &e
	}
	rr := *r
	rr.Call = &c
	b, _ := json.Marshal(rr)
	return string(b)
}

// TestAppendRecord_ReadsBack writes calls read from OTLP spans and from
// call records as call records, reads them back, and expects the same
// call ids and the same reading: the record stands for the call, what the
// span knew outside its payloads (error.type without the opt-in result, no
// JSON-RPC id) included.
func TestAppendRecord_ReadsBack(t *testing.T) {
	span := func(service, tool, attrs string, status int) string {
		return fmt.Sprintf(`{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":%q}}]},"scopeSpans":[{"spans":[`+
			`{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"tools/call","kind":2,`+
			`"startTimeUnixNano":"1793610000123456789","endTimeUnixNano":"1793610001123456789","status":{"code":%d,"message":"the message"},`+
			`"attributes":[{"key":"gen_ai.tool.name","value":{"stringValue":%q}},{"key":"mcp.session.id","value":{"stringValue":"s-1"}}%s]}]}]}]}`,
			service, status, tool, attrs)
	}
	attr := func(k, v string) string {
		return fmt.Sprintf(`,{"key":%q,"value":{"stringValue":%q}}`, k, v)
	}
	patch := attr("gen_ai.tool.call.arguments", `{"path":"a.gram","base_revision":3,"request_id":"r-1","operations":[{"op":"append_block","text":"x"}]}`)
	run := attr("gen_ai.tool.call.arguments", `{"code":"await documents.editDocument({documentId: \"d-1\", operationId: \"op-1\"})"}`)
	save := attr("gen_ai.tool.call.arguments", `{"path":"n.md","idempotency_key":"k-1"}`)
	id := attr("jsonrpc.request.id", "7")
	f := func(name, doc string) {
		t.Run(name, func(t *testing.T) {
			recs := readAll(t, []byte(doc))
			if len(recs) != 1 {
				t.Fatalf("%d calls read, want 1", len(recs))
			}
			line, err := AppendRecord(nil, recs[0])
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
				t.Fatalf("not one line: %q", line)
			}
			back := readAll(t, line)
			if len(back) != 1 {
				t.Fatalf("%d calls read back, want 1", len(back))
			}
			if got, want := reading(back[0]), reading(recs[0]); got != want {
				t.Errorf("read back differs:\n got %s\nwant %s\nrecord %s", got, want, line)
			}
		})
	}
	f("server_code", span("thegram", "gram_patch", patch+id+attr("error.type", "COMMIT_UNKNOWN"), 2))
	f("server_code_no_id", span("thegram", "gram_patch", patch+attr("error.type", "E_STORAGE"), 2))
	f("tool_error", span("thegram", "gram_patch", patch+id+attr("error.type", "tool_error"), 2))
	f("stale_create", span("thegram", "gram_create", attr("gen_ai.tool.call.arguments", `{"path":"b.gram"}`)+attr("error.type", "STALE_REVISION"), 2))
	f("rpc_code", span("thegram", "gram_patch", patch+id+attr("error.type", "-32603"), 2))
	f("app_not_running", span("thegram", "gram_patch", patch+id+attr("error.type", "E_APP_NOT_RUNNING"), 2))
	f("transport", span("thegram", "gram_patch", patch+id+attr("error.type", "timeout"), 2))
	f("status_only", span("thegram", "gram_patch", patch+id, 2))
	f("no_response", span("thegram", "gram_patch", patch+id, 0))
	f("no_payloads", span("thegram", "gram_read", id, 1))
	f("oddlynew_timeout", span("oddlynew", "run", run+id+attr("error.type", "tool_error"), 2))
	f("oddlynew_code", span("oddlynew", "run", run+attr("error.type", "E_RUN_FAILED"), 2))
	f("generic_tool_error", span("notes-mcp", "save_note", save+id+attr("error.type", "tool_error"), 2))
	f("generic_code", span("notes-mcp", "save_note", save+id+attr("error.type", "E_STORAGE"), 2))
	f("result", span("thegram", "gram_patch", patch+id+attr("gen_ai.tool.call.result", "{\n \"structuredContent\": {\"path\":\"a.gram\",\"rev\":4}\n}"), 1))
	f("record_string_id", `{"time":"2026-11-02T09:00:00.123456Z","server":"thegram","session":"s","request":{"jsonrpc":"2.0","id":"abc","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"a"}}},"response":{"jsonrpc":"2.0","id":"abc","result":{"structuredContent":{"path":"a","rev":1}}}}`)
	f("record_no_id_with_span", `{"time":"2026-11-02T09:00:00Z","server":"thegram","trace_id":"aa","span_id":"bb","request":{"method":"tools/call","params":{"name":"gram_read"}},"transport_error":"timeout"}`)
	f("record_rpc_error_data", `{"time":"2026-11-02T09:00:00Z","duration_ms":12.5,"server":"thegram","client":"c/1","tenant":"acme","request":{"jsonrpc":"2.0","id":1.0,"method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"a","request_id":"r"}}},"response":{"jsonrpc":"2.0","id":1.0,"error":{"code":-32000,"message":"m","data":{"code":"E_APP_NOT_RUNNING"}}}}`)
	f("record_html", `{"time":"2026-11-02T09:00:00Z","server":"x","request":{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t","arguments":{"q":"<a & b>"}}},"response":{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"<\u2028>"}]}}}`)
}

// TestRecordWithoutRPCID_SpanIdentity: a call record without a JSON-RPC id
// that names its trace and span takes the call id and fingerprint of the
// OTLP span of the same exchange (audit.IdentityRPC); one with a JSON-RPC
// id, or without a span id, keeps its own. Until rec50 the record's id was
// taken over the empty JSON-RPC id.
func TestRecordWithoutRPCID_SpanIdentity(t *testing.T) {
	span := `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"thegram"}}]},"scopeSpans":[{"spans":[` +
		`{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"tools/call","kind":2,` +
		`"startTimeUnixNano":"1793610000123000000","endTimeUnixNano":"1793610001123000000","status":{"code":1},` +
		`"attributes":[{"key":"gen_ai.tool.name","value":{"stringValue":"gram_read"}},{"key":"mcp.session.id","value":{"stringValue":"s-1"}},` +
		`{"key":"gen_ai.tool.call.arguments","value":{"stringValue":"{\"path\":\"a.gram\"}"}}]}]}]}]}`
	sp := readAll(t, []byte(span))[0].Call
	f := func(name, ids string, same bool) {
		t.Run(name, func(t *testing.T) {
			rec := `{"time":"2026-11-02T09:00:00.123Z","server":"thegram","session":"s-1"` + ids +
				`,"request":{"jsonrpc":"2.0"` + `,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"a.gram"}}},"response":{"result":{}}}`
			if strings.Contains(ids, `"id"`) {
				rec = strings.Replace(rec, `"jsonrpc":"2.0"`, `"jsonrpc":"2.0","id":7`, 1)
				rec = strings.Replace(rec, `,"id":7,"x":0`, ``, 1)
			}
			c := readAll(t, []byte(rec))[0].Call
			if got := c.ID == sp.ID && c.Fingerprint == sp.Fingerprint; got != same {
				t.Errorf("record %s: id %s, span's %s: same %v, want %v", rec, c.ID, sp.ID, got, same)
			}
			if c.RPCID != "" && !strings.Contains(ids, `"id"`) {
				t.Errorf("record %s: JSON-RPC id %q, want none", rec, c.RPCID)
			}
		})
	}
	f("trace_and_span", `,"trace_id":"0102030405060708090a0b0c0d0e0f10","span_id":"0102030405060708"`, true)
	f("other_span", `,"trace_id":"0102030405060708090a0b0c0d0e0f10","span_id":"0102030405060709"`, false)
	f("no_span", ``, false)
	f("rpc_id", `,"trace_id":"0102030405060708090a0b0c0d0e0f10","span_id":"0102030405060708","id":7,"x":0`, false)
}
