package receiver_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// TestCalls_WrongTypesAndNamesTwice: over POST /v1/calls, a record with a
// member of the wrong type or named twice is rejected alone, named by line
// and field, counted as invalid_json, and the good records beside it are
// stored (adv48 saw each taken without a word).
func TestCalls_WrongTypesAndNamesTwice(t *testing.T) {
	e := newEnv(t, nil)
	good := func(i int) string { return record("thegram", "gram_read", now, i) }
	with := func(i int, old, new string) string { return strings.Replace(good(i), old, new, 1) }
	lines := []string{
		good(1),
		with(2, `"method":"tools/call"`, `"method":5`),
		with(3, `"id":3`, `"id":{"n":3}`),
		with(4, `"id":4`, `"id":1e999999`),
		with(5, `"result":{"content":[]}`, `"result":{"content":[],"isError":"false"}`),
		with(6, `"server":"thegram"`, `"server":"thegram","server":"oddlynew"`),
		with(7, `"arguments":{"path":"a.gram"}`, `"arguments":{"path":"a.gram","p\u0061th":"b.gram"}`),
		good(8),
	}
	a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(strings.Join(lines, "\n")))
	var resp receiver.CallsResponse
	if err := json.Unmarshal([]byte(a.body), &resp); err != nil || a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	want := []string{
		"body:2: field request.method: must be a string (the JSON-RPC method), not number",
		"body:3: field request.id: must be a string, a number or null (JSON-RPC 2.0), not object",
		"body:4: field request.id: 1e999999 is past the range of a number",
		"body:5: field response.result: isError must be a boolean, not string",
		"body:6: field server: given twice in one object (at byte offsets ",
		"body:7: field request.params.arguments.path: given twice in one object (at byte offsets ",
	}
	if resp.Accepted != 2 || resp.Rejected != len(want) || len(resp.Errors) != len(want) {
		t.Fatalf("answer %s; want 2 accepted and %d rejected", a.body, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(resp.Errors[i], w) {
			t.Errorf("error %d:\n got %s\nwant %s...", i, resp.Errors[i], w)
		}
	}
	if got := e.storedCalls(t); len(got) != 2 || got[0] != "thegram/1" || got[1] != "thegram/8" {
		t.Errorf("stored %v, want thegram/1 and thegram/8", got)
	}
	if v := testutil.ToFloat64(counter(t, e.reg, "mcpaudit_ingest_rejected_total", map[string]string{"source": "calls_http", "reason": "invalid_json"})); v != float64(len(want)) {
		t.Errorf("mcpaudit_ingest_rejected_total{reason=invalid_json} = %v, want %d", v, len(want))
	}
}

// TestTraces_PayloadNamesTwice: over OTLP/HTTP, protobuf and JSON, a span
// whose gen_ai.tool.call.arguments names a member twice, or whose result's
// isError is not a boolean, is rejected alone and named in
// partial_success; a span whose attribute key is given twice is taken,
// read from the first copy.
func TestTraces_PayloadNamesTwice(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run("json="+strconv.FormatBool(asJSON), func(t *testing.T) {
			e := newEnv(t, nil)
			doc := `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"thegram"}}]},"scopeSpans":[{"spans":[` +
				span49(1, `{"key":"gen_ai.tool.call.arguments","value":{"stringValue":"{\"path\":\"a\",\"path\":\"b\"}"}}`) + `,` +
				span49(2, `{"key":"gen_ai.tool.call.result","value":{"stringValue":"{\"isError\":\"true\"}"}}`) + `,` +
				span49(3, `{"key":"jsonrpc.request.id","value":{"stringValue":"7"}},{"key":"jsonrpc.request.id","value":{"stringValue":"9"}}`) +
				`]}]}]}`
			td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			a, resp := e.postTraces(t, ptraceotlp.NewExportRequestFromTraces(td), asJSON)
			ps := resp.PartialSuccess()
			if a.status != 200 || ps.RejectedSpans() != 2 ||
				!strings.Contains(ps.ErrorMessage(), "resourceSpans[0].scopeSpans[0].spans[0]: gen_ai.tool.call.arguments names path twice (at byte offsets 1 and 12)") ||
				!strings.Contains(ps.ErrorMessage(), "resourceSpans[0].scopeSpans[0].spans[1]: gen_ai.tool.call.result: isError must be a boolean, not string") {
				t.Fatalf("%d %q %d", a.status, ps.ErrorMessage(), ps.RejectedSpans())
			}
			if got := e.storedCalls(t); len(got) != 1 || got[0] != "thegram/7" {
				t.Errorf("stored %v, want thegram/7 (the first copy of the id)", got)
			}
		})
	}
}

// span49 is a gram_read span with the attributes attrs besides its tool.
func span49(i int, attrs string) string {
	return `{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"010203040506070` + strconv.Itoa(i) + `","kind":2,"startTimeUnixNano":"` +
		strconv.FormatInt(now.UnixNano()+int64(i)*1e9, 10) + `","attributes":[{"key":"gen_ai.tool.name","value":{"stringValue":"gram_read"}},` + attrs + `]}`
}
