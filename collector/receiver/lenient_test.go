package receiver_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCalls_ReadLeniently: over POST /v1/calls, records with members of
// the wrong type or named twice are kept (capture-format.md §1 rejects
// none of them), each read as the MCP SDKs read it (a name given twice:
// the last copy), stored through the real pipeline and store, and named
// in the answer's warnings and the log by line, field and byte offset,
// counted in mcpaudit_ingest_warnings_total. The cases are strict49's
// (427882a), which refused these records; until rec50 they were taken
// without a word, and a name given twice was read from its first copy.
func TestCalls_ReadLeniently(t *testing.T) {
	e := newEnv(t, nil)
	good := func(i int) string { return record("thegram", "gram_read", now, i) }
	with := func(i int, old, new string) string { return strings.Replace(good(i), old, new, 1) }
	lines := []string{
		good(1),
		with(2, `"method":"tools/call"`, `"method":5`),
		with(3, `"id":3`, `"id":{"n":3}`),
		with(4, `"result":{"content":[]}`, `"result":{"content":[],"isError":"false"}`),
		with(5, `"server":"thegram"`, `"server":"oddlynew","server":"thegram"`),
		with(6, `"arguments":{"path":"a.gram"}`, `"arguments":{"path":"a.gram","p\u0061th":"b.gram"}`),
		with(7, `"id":7`, `"id":70,"id":7`),
		with(8, `"arguments":{"path":"a.gram"}`, `"arguments":"a.gram"`),
		with(9, `"result":{"content":[]}`, `"result":[]`),
		good(10),
	}
	a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(strings.Join(lines, "\n")))
	var resp receiver.CallsResponse
	if err := json.Unmarshal([]byte(a.body), &resp); err != nil || a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	want := []string{
		"body:2: field request.method at byte offset ",
		"body:3: field request.id at byte offset ",
		"body:4: field response.result.isError at byte offset ",
		"body:5: field server at byte offset ",
		"body:6: field request.params.arguments.path at byte offset ",
		"body:7: field request.id at byte offset ",
		"body:8: field request.params.arguments at byte offset ",
		"body:9: field response.result at byte offset ",
	}
	if resp.Accepted != len(lines) || resp.Rejected != 0 || resp.Warned != len(want) || len(resp.Warnings) != len(want) {
		t.Fatalf("answer %s; want %d accepted, none rejected, %d warned", a.body, len(lines), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(resp.Warnings[i], w) {
			t.Errorf("warning %d:\n got %s\nwant %s...", i, resp.Warnings[i], w)
		}
	}
	stored := e.storedCalls(t)
	if len(stored) != len(lines) || !slices.Contains(stored, "thegram/7") || slices.Contains(stored, "thegram/70") || slices.Contains(stored, "oddlynew/5") {
		t.Errorf("stored %v, want every record, the last copies read (thegram/5, thegram/7)", stored)
	}
	for _, c := range e.stored(t) {
		if c.RPCID == "6" && string(c.Arguments) != `{                "p\u0061th":"b.gram"}` {
			t.Errorf("arguments stored %s, want the last copy alone", c.Arguments)
		}
	}
	counts := map[string]float64{"duplicate_name": 3, "wrong_type_id": 1, "wrong_type_method": 1, "wrong_type_arguments": 1, "wrong_type_result": 1, "wrong_type_is_error": 1}
	for reason, n := range counts {
		if v := testutil.ToFloat64(counter(t, e.reg, "mcpaudit_ingest_warnings_total", map[string]string{"source": "calls_http", "reason": reason})); v != n {
			t.Errorf("mcpaudit_ingest_warnings_total{reason=%s} = %v, want %v", reason, v, n)
		}
	}
	if logged := e.logs.lines(t, "record_warning"); len(logged) != len(want) || !strings.HasPrefix(logged[0]["error"].(string), want[0]) {
		t.Errorf("logged %v, want %d warnings", logged, len(want))
	}
}

// TestWarnReasons: the reasons of mcpaudit_ingest_warnings_total are the
// kinds of capture's warnings.
func TestWarnReasons(t *testing.T) {
	if !slices.Equal(capture.Warnings, metrics.WarnReasons) {
		t.Errorf("capture.Warnings %v, metrics.WarnReasons %v", capture.Warnings, metrics.WarnReasons)
	}
}
