package receiver_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// TestCalls_IDCollision: two call records of one call id (the same
// request at the same millisecond) that carry different responses are
// not a second observation of one exchange: the second is dropped, as a
// duplicate is (the store keeps one row per id), and counted as an id
// collision in the status and the metric and logged as a WARN naming the
// call, as OTLP span-id collisions are; in one request or two. The same
// response sent again, reformatted (members reordered, white space,
// escapes), is a plain duplicate; so is an observation without a response
// beside one with (a client and a server observer), which completes it.
// Over OTLP, a span sent again under its ids with another result is one
// too.
func TestCalls_IDCollision(t *testing.T) {
	e := newEnv(t, nil)
	watchCollisions(t, e)
	at := now.Format(time.RFC3339Nano)
	rec := func(id int, response string) string {
		line := fmt.Sprintf(`{"time":%q,"server":"thegram","session":"s1","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"a.gram"}}}`, at, id)
		if response != "" {
			line += `,"response":` + response
		}
		return line + "}"
	}
	ok := `{"jsonrpc":"2.0","id":%d,"result":{"isError":false,"structuredContent":{"path":"a.gram","rev":3,"hash":"aa"}}}`
	reformatted := `{ "id" : %d , "jsonrpc":"2.0", "result":{"structuredContent":{"hash":"\u0061a","rev":3,"path":"a.gram"},"isError":false}}`
	otherRev := `{"jsonrpc":"2.0","id":%d,"result":{"isError":false,"structuredContent":{"path":"a.gram","rev":4,"hash":"bb"}}}`
	failed := `{"jsonrpc":"2.0","id":%d,"result":{"isError":true,"structuredContent":{"error":{"code":"E_STORAGE","message":"disk"}}}}`
	post := func(lines ...string) {
		t.Helper()
		if a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(strings.Join(lines, "\n")+"\n")); a.status != 200 {
			t.Fatalf("%d %s", a.status, a.body)
		}
	}
	// Call 1: the same response reformatted, then without a response.
	post(rec(1, fmt.Sprintf(ok, 1)), rec(1, fmt.Sprintf(reformatted, 1)), rec(1, ""))
	// Call 2: another response in the same request; call 3: in another.
	post(rec(2, fmt.Sprintf(ok, 2)), rec(2, fmt.Sprintf(otherRev, 2)), rec(3, fmt.Sprintf(ok, 3)))
	post(rec(3, fmt.Sprintf(failed, 3)))
	// A span sent twice under its ids, the second time with another
	// result.
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "thegram")
	ss := rs.ScopeSpans().AppendEmpty()
	for _, result := range []string{`{"isError":false,"structuredContent":{"path":"b.gram","rev":1,"hash":"cc"}}`, `{"isError":false,"structuredContent":{"path":"b.gram","rev":2,"hash":"dd"}}`} {
		sp := appendCall(ss, 9, "s2", now.Add(time.Second))
		sp.Attributes().PutStr("gen_ai.tool.call.arguments", `{"path":"b.gram"}`)
		sp.Attributes().PutStr("gen_ai.tool.call.result", result)
	}
	if a, resp := e.postTraces(t, ptraceotlp.NewExportRequestFromTraces(td), false); a.status != 200 || resp.PartialSuccess().RejectedSpans() != 0 {
		t.Fatalf("%d %s", a.status, a.body)
	}

	// The other carrier: a call record, then the same exchange as a span
	// whose recorded result is the record's reformatted, and as one that
	// recorded no result (its response unknown): plain duplicates.
	post(rec(5, fmt.Sprintf(ok, 5)))
	td = ptrace.NewTraces()
	rs = td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "thegram")
	ss = rs.ScopeSpans().AppendEmpty()
	for _, result := range []string{`{"structuredContent":{"rev":3,"hash":"aa","path":"a.gram"},"isError":false}`, ""} {
		sp := appendCall(ss, 5, "s1", now)
		sp.Attributes().PutStr("gen_ai.tool.call.arguments", `{"path":"a.gram"}`)
		if result != "" {
			sp.Attributes().PutStr("gen_ai.tool.call.result", result)
		}
	}
	if a, resp := e.postTraces(t, ptraceotlp.NewExportRequestFromTraces(td), false); a.status != 200 || resp.PartialSuccess().RejectedSpans() != 0 {
		t.Fatalf("%d %s", a.status, a.body)
	}

	stored := e.stored(t)
	if len(stored) != 5 {
		t.Errorf("stored %d calls, want 5 (one per call id)", len(stored))
	}
	lines, ids := checkCollisions(t, e, stored, 3)
	for _, l := range lines {
		if l["level"] != "WARN" || l["tenant"] != "acme" || l["server"] != "thegram" || fmt.Sprint(l["differs"]) != "[response]" ||
			l["call_id"] != l["kept_call_id"] || !strings.Contains(l["msg"].(string), "different responses") {
			t.Errorf("line %v", l)
		}
		if id, _ := l["call_id"].(string); !ids[id] {
			t.Errorf("the line names call %q, not one stored", l["call_id"])
		}
	}
}
