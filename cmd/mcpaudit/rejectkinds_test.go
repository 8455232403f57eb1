package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// rejectedBySource reads mcpaudit_ingest_rejected_total of one source out
// of exposition text, by reason, leaving out zeros.
func rejectedBySource(t *testing.T, text string, src metrics.Source) map[string]int {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + metrics.IngestRejectedTotal + `\{reason="([a-z_]+)",source="` + string(src) + `"\} (\S+)$`)
	out := map[string]int{}
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		n, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			out[m[1]] += int(n)
		}
	}
	return out
}

// TestRejectKinds_ServeAsAnalyze: the same bad lines and spans, every way
// a record or span is rejected as it is read, are counted under the same
// reasons by serve (POST /v1/calls and /v1/traces of a real server) and
// by analyze --metrics (source="file"), and under the reasons this table
// names. serve told a record's reasons apart by their words: a missing
// tool name counted as invalid_json there and missing_field in analyze,
// and a time that is not RFC 3339 as bad_time there and invalid_json in
// analyze; a span or resource longer than a line counted as bad_span or
// invalid_json in analyze; a span's start or end time field that cannot be
// read, or a start of 0, counted as bad_span in both.
func TestRejectKinds_ServeAsAnalyze(t *testing.T) {
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	ts := at.Format(time.RFC3339Nano)
	rec := func(rpc int, members string) string {
		return `{` + members + `"server":"thegram","session":"s1","request":{"jsonrpc":"2.0","id":` + strconv.Itoa(rpc) +
			`,"method":"tools/call","params":{"name":"gram_read","arguments":{"doc":"d1"}}},"response":{"jsonrpc":"2.0","id":` +
			strconv.Itoa(rpc) + `,"result":{"content":[]}}}`
	}
	good := func(rpc int) string { return rec(rpc, `"time":"`+ts+`",`) }
	drop := func(s, old, new string) string {
		t.Helper()
		if !strings.Contains(s, old) {
			t.Fatalf("%q not in %s", old, s)
		}
		return strings.Replace(s, old, new, 1)
	}
	lines := []struct{ line, want string }{
		{good(1), ""},
		{`{"time":`, "invalid_json"},
		{`[1,2]`, "invalid_json"},
		{`{"time":"` + ts + `","server":NaN}`, "invalid_json"},
		{rec(2, ""), "missing_field"},
		{drop(good(3), `"server":"thegram",`, ""), "missing_field"},
		{drop(good(4), `"request":{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"gram_read","arguments":{"doc":"d1"}}},`, ""), "missing_field"},
		{drop(good(5), `"name":"gram_read",`, ""), "missing_field"},
		{rec(6, `"time":"yesterday",`), "bad_time"},
		{rec(7, `"time":17,`), "bad_time"},
		{rec(8, `"time":"`+ts+`","duration_ms":-5,`), "bad_time"},
		{rec(9, `"time":"`+ts+`","duration_ms":1e308,`), "bad_time"},
		{rec(10, `"time":"`+ts+`","duration_ms":"5",`), "bad_time"},
		{drop(good(11), `{"doc":"d1"}`, `{"doc":"`+strings.Repeat("x", capture.MaxLine)+`"}`), "too_large"},
		{drop(good(12), `"session":"s1"`, `"session":7`), "invalid_json"},
		{good(13), ""},
	}
	want := map[string]int{}
	var calls bytes.Buffer
	for _, l := range lines {
		calls.WriteString(l.line + "\n")
		if l.want != "" {
			want[l.want]++
		}
	}

	// One OTLP JSON document: one good span and one of each way a span is
	// rejected as it is read.
	ns := func(d time.Duration) string { return strconv.FormatInt(at.Add(d).UnixNano(), 10) }
	attr := func(k, v string) string {
		return `{"key":"` + k + `","value":{"stringValue":` + strconv.Quote(v) + `}}`
	}
	span := func(id int, start, end string, attrs ...string) string {
		return fmt.Sprintf(`{"traceId":"%032x","spanId":"%016x","name":"tools/call","kind":2,"startTimeUnixNano":"%s","endTimeUnixNano":"%s","attributes":[%s]}`,
			id, id, start, end, strings.Join(attrs, ","))
	}
	call := func(id int, extra ...string) []string {
		return append([]string{attr("mcp.method.name", "tools/call"), attr("gen_ai.tool.name", "gram_read"),
			attr("jsonrpc.request.id", strconv.Itoa(100+id)), attr("mcp.session.id", "s2")}, extra...)
	}
	// Deeper than serve.receiver.max_depth (32) and than the nesting
	// analyze follows in an attribute it reads (64). A deep value in an
	// attribute analyze does not read is serve's limit alone, as the name
	// and payload caps are.
	deep := `{"stringValue":"x"}`
	for range 70 {
		deep = `{"arrayValue":{"values":[` + deep + `]}}`
	}
	spans := []struct{ span, want string }{
		{span(1, ns(0), ns(time.Millisecond), call(1)...), ""},
		{span(2, ns(0), ns(time.Millisecond), attr("mcp.method.name", "tools/call")), "bad_span"},
		{span(3, ns(time.Second), ns(0), call(3)...), "bad_time"},
		{span(4, ns(0), ns(time.Millisecond), call(4, attr("gen_ai.tool.call.arguments", "{nope"))...), "bad_span"},
		{span(5, "0", ns(time.Millisecond), call(5)...), "bad_time"},
		{span(6, ns(0), ns(time.Millisecond), attr("mcp.method.name", "tools/call"), `{"key":"gen_ai.tool.name","value":`+deep+`}`), "too_deep"},
		{span(7, ns(0), ns(time.Millisecond), call(7, attr("gen_ai.tool.call.arguments", `{"doc":"`+strings.Repeat("x", capture.MaxLine)+`"}`))...), "too_large"},
	}
	// A time field that cannot be read is bad_time, as a record's time
	// is: they counted as bad_span, as a start of 0 did. pdata refuses
	// them, and serve salvages the spans beside them, which it does not
	// for a body of more than 4 MiB (span 7's): a document of their own.
	timeSpans := []struct{ span, want string }{
		{span(8, "soon", ns(time.Millisecond), call(8)...), "bad_time"},
		{span(9, ns(0), "-1", call(9)...), "bad_time"},
		{span(10, ns(0), ns(time.Millisecond), call(10)...), ""},
	}
	var ss []string
	for _, s := range spans {
		ss = append(ss, s.span)
		if s.want != "" {
			want[s.want]++
		}
	}
	doc := func(ss []string) string {
		return `{"resourceSpans":[{"resource":{"attributes":[` + attr("service.name", "thegram") + `]},"scopeSpans":[{"scope":{},"spans":[` +
			strings.Join(ss, ",") + `]}]}]}`
	}
	traces := doc(ss)
	ss = nil
	for _, s := range timeSpans {
		ss = append(ss, s.span)
		if s.want != "" {
			want[s.want]++
		}
	}
	timeTraces := doc(ss)

	// analyze, over both as files.
	dir := t.TempDir()
	callsFile, tracesFile, metricsFile := filepath.Join(dir, "calls.ndjson"), filepath.Join(dir, "traces.json"), filepath.Join(dir, "metrics.prom")
	timeFile := filepath.Join(dir, "times.json")
	if err := os.WriteFile(timeFile, []byte(timeTraces), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(callsFile, calls.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tracesFile, []byte(traces), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"analyze", "--format", "json", "--progress", "never", "--metrics", metricsFile, callsFile, tracesFile, timeFile}, nil, &out, &errb); code == 2 {
		t.Fatalf("analyze: %s", errb.String())
	}
	prom, err := os.ReadFile(metricsFile)
	if err != nil {
		t.Fatal(err)
	}
	analyzed := rejectedBySource(t, string(prom), metrics.SourceFile)

	// serve, over /v1/calls and OTLP/HTTP JSON.
	s := startTest(t, testConfig(t, t.TempDir()))
	post := func(path string, body []byte) {
		t.Helper()
		resp, err := http.Post("http://"+s.ingestAddr+path, map[bool]string{true: "application/x-ndjson", false: "application/json"}[path == "/v1/calls"], bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %s %.500s", path, resp.Status, b)
		}
	}
	post("/v1/calls", calls.Bytes())
	post("/v1/traces", []byte(traces))
	post("/v1/traces", []byte(timeTraces))
	text := scrapeMetrics(t, s)
	served := rejectedBySource(t, text, metrics.SourceCallsHTTP)
	for r, n := range rejectedBySource(t, text, metrics.SourceOTLPHTTP) {
		served[r] += n
	}

	if fmt.Sprint(analyzed) != fmt.Sprint(want) {
		t.Errorf("analyze counted %v, want %v", analyzed, want)
	}
	if fmt.Sprint(served) != fmt.Sprint(want) {
		t.Errorf("serve counted %v, want %v", served, want)
	}
}
