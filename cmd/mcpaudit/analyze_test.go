package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// analyzeJSON runs analyze --format json over files and returns the sorted
// finding lines.
func analyzeJSON(t *testing.T, files ...string) []string {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"analyze", "--format", "json", "--progress", "never"}, files...), nil, &out, &errb)
	if code == 2 {
		t.Fatalf("analyze %v: %s", files, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	sort.Strings(lines)
	return lines
}

func writeLines(t *testing.T, path string, lines [][]byte) {
	t.Helper()
	if err := os.WriteFile(path, append(bytes.Join(lines, []byte("\n")), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestAnalyze_InputsMergedByTime: the inputs of one run are one stream in
// event time, whatever their order: a capture split by server, a second
// observer's copy of every exchange, and OTLP grouped by service all give
// the findings of the single ordered file.
func TestAnalyze_InputsMergedByTime(t *testing.T) {
	dir := t.TempDir()
	c := capgen.Generate(capgen.Config{Seed: 21, Sessions: 400, Span: 40 * time.Minute, AnomalyRate: 0.3, NoiseRate: 0.0001})
	var recs [][]byte
	for _, l := range c.Lines {
		if json.Valid(l) && bytes.Contains(l, []byte(`"request"`)) {
			recs = append(recs, l)
		}
	}
	all := filepath.Join(dir, "all.ndjson")
	writeLines(t, all, recs)
	want := analyzeJSON(t, all)
	if len(want) < 50 {
		t.Fatalf("only %d findings", len(want))
	}

	// Split by server.
	var tg, on [][]byte
	for _, l := range recs {
		if bytes.Contains(l, []byte(`"server":"thegram"`)) {
			tg = append(tg, l)
		} else {
			on = append(on, l)
		}
	}
	writeLines(t, filepath.Join(dir, "tg.ndjson"), tg)
	writeLines(t, filepath.Join(dir, "on.ndjson"), on)
	for _, order := range [][]string{{"on.ndjson", "tg.ndjson"}, {"tg.ndjson", "on.ndjson"}} {
		got := analyzeJSON(t, filepath.Join(dir, order[0]), filepath.Join(dir, order[1]))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("split by server, %v: %d findings, want %d", order, len(got), len(want))
		}
	}

	// A server-side observer saw every exchange 300 ms later.
	var shifted [][]byte
	for _, l := range recs {
		var m map[string]any
		json.Unmarshal(l, &m)
		tm, _ := time.Parse(time.RFC3339Nano, m["time"].(string))
		m["time"] = tm.Add(300 * time.Millisecond).Format(time.RFC3339Nano)
		b, _ := json.Marshal(m)
		shifted = append(shifted, b)
	}
	writeLines(t, filepath.Join(dir, "server.ndjson"), shifted)
	if got := analyzeJSON(t, all, filepath.Join(dir, "server.ndjson")); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("two observers: %d findings, want %d", len(got), len(want))
	}
	if got := analyzeJSON(t, all, all); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("one file twice: %d findings, want %d", len(got), len(want))
	}

	// OTLP with one resource block per server pod, as exporters write it;
	// the calls of a session were load-balanced across two pods.
	otlpPath := filepath.Join(dir, "grouped.otlp.json")
	writeOTLPGrouped(t, otlpPath, recs)
	if got := analyzeJSON(t, otlpPath); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("OTLP grouped by pod: %d findings, want %d", len(got), len(want))
	}
}

// writeOTLPGrouped writes call records as one OTLP JSON document with one
// resource block per server pod (calls alternate between two pods of each
// server), spans in file order within each.
func writeOTLPGrouped(t *testing.T, path string, recs [][]byte) {
	t.Helper()
	td := ptrace.NewTraces()
	blocks := map[string]ptrace.SpanSlice{}
	for i, l := range recs {
		var r map[string]any
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		server := r["server"].(string)
		pod := fmt.Sprintf("%s-%d", server, i%2)
		spans, ok := blocks[pod]
		if !ok {
			rs := td.ResourceSpans().AppendEmpty()
			rs.Resource().Attributes().PutStr("service.name", server)
			rs.Resource().Attributes().PutStr("service.instance.id", pod)
			spans = rs.ScopeSpans().AppendEmpty().Spans()
			blocks[pod] = spans
		}
		sp := spans.AppendEmpty()
		sp.SetKind(ptrace.SpanKindServer)
		sp.SetTraceID(pcommon.TraceID{byte(i >> 16), byte(i >> 8), byte(i), 1})
		sp.SetSpanID(pcommon.SpanID{byte(i >> 16), byte(i >> 8), byte(i), 1})
		start, _ := time.Parse(time.RFC3339Nano, r["time"].(string))
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(100 * time.Millisecond)))
		req := r["request"].(map[string]any)
		params := req["params"].(map[string]any)
		a := sp.Attributes()
		a.PutStr("mcp.method.name", "tools/call")
		a.PutStr("gen_ai.tool.name", params["name"].(string))
		a.PutStr("jsonrpc.request.id", fmt.Sprint(req["id"]))
		a.PutStr("mcp.session.id", r["session"].(string))
		args, _ := json.Marshal(params["arguments"])
		a.PutStr("gen_ai.tool.call.arguments", string(args))
		if te, ok := r["transport_error"].(string); ok {
			a.PutStr("error.type", te)
			sp.Status().SetCode(ptrace.StatusCodeError)
		} else if resp, ok := r["response"].(map[string]any); ok {
			res := resp["result"].(map[string]any)
			b, _ := json.Marshal(res)
			a.PutStr("gen_ai.tool.call.result", string(b))
			if res["isError"] == true {
				a.PutStr("error.type", "tool_error")
				sp.Status().SetCode(ptrace.StatusCodeError)
			}
		}
	}
	var m ptrace.JSONMarshaler
	b, err := m.MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPrintJSON_AsMarshal: analyze prints each finding as json.Marshal
// would, byte for byte, with text it escapes (HTML, line separators,
// invalid UTF-8) in every string field.
func TestPrintJSON_AsMarshal(t *testing.T) {
	odd := "a<b>&c\u2028d\xff\"e\\\n"
	f := audit.Finding{
		Kind: audit.Kind("double_apply"), Severity: audit.Severity("critical"), Server: "thegram" + odd, Tenant: odd,
		Document: odd, Key: odd, Session: odd, Time: time.Date(2026, 11, 2, 9, 0, 0, 123456000, time.UTC),
		Calls: []string{"c_1" + odd, "c_2"}, Reason: audit.Reason(odd), RetryAction: audit.RetryAction(odd), Summary: odd,
	}
	col := &collector{findings: []audit.Finding{f, {Kind: "unverified", Time: f.Time}}}
	var got bytes.Buffer
	col.printJSON(&got)
	var want []byte
	for i := range col.findings {
		b, err := json.Marshal(&col.findings[i])
		if err != nil {
			t.Fatal(err)
		}
		want = append(append(want, b...), '\n')
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("printJSON wrote\n%s\njson.Marshal gives\n%s", got.Bytes(), want)
	}
	if !bytes.Contains(want, []byte(`\u003cb\u003e\u0026c\u2028d\ufffd`)) {
		t.Fatalf("the test's text is no longer escaped: %s", want)
	}
}

// TestAnalyze_SummaryIDCollisions: a call under the trace and span id of
// another exchange is dropped unjudged; the summary says how many, in the
// text only when there are any (as the other dropped counts), in the JSON
// always. An exact second observation is a duplicate, not a collision;
// another response under one call id is one.
func TestAnalyze_SummaryIDCollisions(t *testing.T) {
	dir := t.TempDir()
	line := func(session string, id int) []byte {
		return fmt.Appendf(nil, `{"time":"2026-12-04T10:00:00Z","server":"thegram","session":%q,"trace_id":"0af7651916cd43dd8448eb211c80319c","span_id":"b7ad6b7169203331","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false}}}`, session, id, id)
	}
	f := func(name string, lines [][]byte, dups, collisions int) {
		t.Helper()
		path := filepath.Join(dir, name+".ndjson")
		writeLines(t, path, lines)
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"analyze", "--progress", "never", path}, nil, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, errb.String())
		}
		text := out.String()
		said := fmt.Sprintf("(%d duplicate observations dropped, %d of them id collisions", dups, collisions)
		if collisions > 0 && !strings.Contains(text, said) || collisions == 0 && strings.Contains(text, "collision") {
			t.Errorf("%s: text summary\n%s\nwant %q only when there are collisions", name, text, said)
		}
		out.Reset()
		errb.Reset()
		run(context.Background(), []string{"analyze", "--progress", "never", "--format", "json", "--summary", "json", path}, nil, &out, &errb)
		var sum map[string]any
		if err := json.Unmarshal(errb.Bytes(), &sum); err != nil {
			t.Fatalf("%s: JSON summary: %v: %s", name, err, errb.String())
		}
		if sum["id_collisions"] != float64(collisions) || sum["duplicates"] != float64(dups) {
			t.Errorf("%s: JSON summary id_collisions %v, duplicates %v; want %d, %d", name, sum["id_collisions"], sum["duplicates"], collisions, dups)
		}
	}
	f("collision", [][]byte{line("s-a", 1), line("s-b", 2)}, 1, 1)
	f("exact", [][]byte{line("s-a", 1), line("s-a", 1)}, 1, 0)
	// One call id (the same request at the same millisecond, without
	// span ids) with another response is a collision too; the same
	// response reformatted is not.
	record := func(result string) []byte {
		return fmt.Appendf(nil, `{"time":"2026-12-04T10:00:00Z","server":"thegram","session":"s-c","request":{"id":7,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d.gram"}}},"response":{"id":7,"jsonrpc":"2.0","result":%s}}`, result)
	}
	f("response", [][]byte{record(`{"isError":false,"structuredContent":{"rev":1}}`), record(`{"isError":true}`)}, 1, 1)
	f("response_reformatted", [][]byte{record(`{"isError":false,"structuredContent":{"rev":1}}`), record(`{ "structuredContent" : {"rev":1}, "isError":false }`)}, 1, 0)
}
