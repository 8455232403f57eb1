package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// testConfig is a server config on loopback with system-chosen ports and
// short windows, so tests settle fast.
func testConfig(t *testing.T, dataDir string) Config {
	cfg := NewDefaultConfig()
	cfg.Serve.IngestListen = "127.0.0.1:0"
	cfg.Serve.GRPCListen = "127.0.0.1:0"
	cfg.Serve.APIListen = "127.0.0.1:0"
	cfg.Serve.DataDir = dataDir
	cfg.Detect.Lateness = time.Second
	// Sources fall idle, and new partitions start judging, after a second.
	cfg.Detect.IdleTimeout = time.Second
	cfg.Serve.Pipeline.CommitEvery = 50 * time.Millisecond
	// After a restart, a partition whose sources were delivering holds its
	// watermark at what they had delivered for restart_grace + idle_timeout
	// (docs/detection.md): the tests that restart deliver again at once and
	// wait 20 s for the findings.
	cfg.Serve.Pipeline.RestartGrace = 5 * time.Second
	// The example captures are dated from 2026-11-02, and some tests add
	// live calls beside them: retention counts back from the newest call,
	// so a restart would delete the examples in its first sweep. Tests of
	// retention set their own.
	cfg.Serve.Retention = Duration(100 * 365 * 24 * time.Hour)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func startTest(t *testing.T, cfg Config) *server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	s, err := startServer(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.shutdown(ctx)
	})
	return s
}

// mergedCapture puts every example capture on one timeline, each two hours
// after the previous, so that they do not correlate with each other.
func mergedCapture(t *testing.T) []map[string]any {
	t.Helper()
	files, _ := filepath.Glob("../../testdata/examples/*.ndjson")
	sort.Strings(files)
	var out []map[string]any
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatal(err)
			}
			tm, _ := time.Parse(time.RFC3339Nano, m["time"].(string))
			m["time"] = tm.Add(time.Duration(i) * 2 * time.Hour).Format(time.RFC3339Nano)
			out = append(out, m)
		}
	}
	return out
}

// postCallsAs posts body, call records, to the ingest listener at addr as
// the poster source (Mcpaudit-Source); an error unless it is acknowledged.
// Safe from any goroutine.
func postCallsAs(addr, source string, body []byte) error {
	req, err := http.NewRequest("POST", "http://"+addr+"/v1/calls", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set(receiver.SourceHeader, source)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /v1/calls from %s: %s", source, resp.Status)
	}
	return nil
}

// postAs is postCallsAs that stops the test unless the calls are
// acknowledged.
func postAs(t *testing.T, addr, source string, body []byte) {
	t.Helper()
	if err := postCallsAs(addr, source, body); err != nil {
		t.Fatal(err)
	}
}

func ndjson(recs []map[string]any) []byte {
	var b bytes.Buffer
	for _, r := range recs {
		j, _ := json.Marshal(r)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// analyzeFindings runs the detector over data as analyze does, with cfg's
// windows.
func analyzeFindings(t *testing.T, cfg Config, data []byte) []audit.Finding {
	t.Helper()
	var fs []audit.Finding
	a := newAnalyzer(cfg, findingSink(func(f *audit.Finding) { fs = append(fs, *f) }))
	dec, err := capture.NewDecoder(bytes.NewReader(data), "capture")
	if err != nil {
		t.Fatal(err)
	}
	if a.red == nil {
		dec.DropPayloads()
	}
	for {
		r, err := dec.NextRecord(a.reader)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		a.add(r, dec.Known())
	}
	a.eng.Flush()
	return sortFindings(fs)
}

type findingSink func(*audit.Finding)

func (f findingSink) Call(*audit.Record)                   {}
func (f findingSink) Write(*audit.Write, audit.WriteState) {}
func (f findingSink) Finding(x *audit.Finding)             { f(x) }

func sortFindings(fs []audit.Finding) []audit.Finding {
	sort.SliceStable(fs, func(i, j int) bool {
		if !fs[i].Time.Equal(fs[j].Time) {
			return fs[i].Time.Before(fs[j].Time)
		}
		return fs[i].ID() < fs[j].ID()
	})
	return fs
}

// apiFindings reads every page of the findings API.
func apiFindings(t *testing.T, s *server, query string) []audit.Finding {
	t.Helper()
	var all []audit.Finding
	cursor := ""
	for i := 0; i < 1000; i++ {
		u := "http://" + s.apiAddr + "/api/v1/findings?limit=7&" + query
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		var page audit.FindingPage
		getJSON(t, u, &page)
		for _, f := range page.Findings {
			if f.Status != nil && f.Status.State == audit.FindingOpen && f.Status.By == "" {
				f.Status = nil // analyze's findings have no lifecycle
			}
			all = append(all, f)
		}
		if page.NextCursor == "" {
			return sortFindings(all)
		}
		cursor = page.NextCursor
	}
	t.Fatal("pagination does not end")
	return nil
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", u, resp.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

// waitFindings polls the API until it returns want, or fails after a while.
func waitFindings(t *testing.T, s *server, want []audit.Finding) {
	t.Helper()
	var got []audit.Finding
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got = apiFindings(t, s, "")
		// The API's contract is its JSON: compare that.
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if bytes.Equal(gj, wj) {
			return
		}
	}
	var diff []string
	for i := 0; i < max(len(got), len(want)); i++ {
		var g, w []byte
		if i < len(got) {
			g, _ = json.Marshal(got[i])
		}
		if i < len(want) {
			w, _ = json.Marshal(want[i])
		}
		if !bytes.Equal(g, w) {
			diff = append(diff, fmt.Sprintf("#%d\n got %s\nwant %s", i, g, w))
		}
		if len(diff) == 3 {
			break
		}
	}
	t.Fatalf("API findings (%d) differ from analyze (%d):\n%s", len(got), len(want), strings.Join(diff, "\n"))
}

func postCalls(t *testing.T, s *server, body []byte, gz bool) *http.Response {
	t.Helper()
	if gz {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(body)
		zw.Close()
		body = b.Bytes()
	}
	req, _ := http.NewRequest("POST", "http://"+s.ingestAddr+"/v1/calls", bytes.NewReader(body))
	if gz {
		req.Header.Set("Content-Encoding", "gzip")
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestServe_CallRecords replays the example captures as call records over
// HTTP, in batches, and expects the findings of analyze from the API.
func TestServe_CallRecords(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	s := startTest(t, cfg)
	recs := mergedCapture(t)
	for i := 0; i < len(recs); i += 10 {
		end := min(i+10, len(recs))
		resp := postCalls(t, s, ndjson(recs[i:end]), i%20 == 0)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), fmt.Sprintf(`"accepted":%d`, end-i)) {
			t.Fatalf("batch %d: %s %s", i, resp.Status, b)
		}
	}
	want := analyzeFindings(t, cfg, ndjson(recs))
	if len(want) < 15 {
		t.Fatalf("analyze found only %d findings", len(want))
	}
	waitFindings(t, s, want)

	// The same records again are second observations: stored once, counted
	// as duplicates, and the findings do not change.
	resp := postCalls(t, s, ndjson(recs[:10]), false)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	dup := `mcpaudit_ingest_records_total{result="duplicate",source="calls_http"} 10`
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r, err := http.Get("http://" + s.apiAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if strings.Contains(string(b), dup) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s in /metrics", dup)
		}
	}
	waitFindings(t, s, want)

	// Filters and the other endpoints answer from the same data.
	crit := apiFindings(t, s, "severity=critical&server=thegram")
	for _, f := range crit {
		if f.Severity != audit.SeverityCritical || f.Server != "thegram" {
			t.Errorf("filter leaked %+v", f)
		}
	}
	var tl struct {
		Document string                `json:"document"`
		Events   []audit.TimelineEvent `json:"events"`
	}
	getJSON(t, "http://"+s.apiAddr+"/api/v1/documents/ops%2Fnotes-1d0459.gram/timeline", &tl)
	kinds := map[string]int{}
	for _, e := range tl.Events {
		kinds[e.Type]++
	}
	if kinds["call"] != 4 || kinds["write"] != 2 || kinds["finding"] != 1 {
		t.Errorf("timeline of ops/notes-1d0459.gram: %v", kinds)
	}
	var slo struct {
		SLI    *float64                   `json:"sli"`
		Counts map[audit.WriteState]int64 `json:"counts"`
	}
	getJSON(t, "http://"+s.apiAddr+"/api/v1/slo?window=3650d", &slo)
	if slo.SLI == nil || slo.Counts[audit.StateDoubleApplied] == 0 {
		t.Errorf("slo = %+v", slo)
	}
}

// sendSpans emits every record as an MCP semconv server span through the
// OpenTelemetry Go SDK and the given exporter, one tracer provider per
// server (service.name), with the opt-in arguments and result attributes.
func sendSpans(t *testing.T, recs []map[string]any, newExporter func() (sdktrace.SpanExporter, error)) {
	t.Helper()
	ctx := context.Background()
	providers := map[string]*sdktrace.TracerProvider{}
	for _, r := range recs {
		server := r["server"].(string)
		tp := providers[server]
		if tp == nil {
			exp, err := newExporter()
			if err != nil {
				t.Fatal(err)
			}
			// One export per span keeps arrival in event-time order across
			// the providers of the two servers; batching per provider would
			// deliver one server's hours ahead of the other's, beyond any
			// lateness bound.
			tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
				sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", server))))
			providers[server] = tp
		}
		start, _ := time.Parse(time.RFC3339Nano, r["time"].(string))
		req := r["request"].(map[string]any)
		params := req["params"].(map[string]any)
		args, _ := json.Marshal(params["arguments"])
		attrs := []attribute.KeyValue{
			attribute.String("mcp.method.name", "tools/call"),
			attribute.String("gen_ai.tool.name", params["name"].(string)),
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("jsonrpc.request.id", fmt.Sprint(req["id"])),
			attribute.String("gen_ai.tool.call.arguments", string(args)),
		}
		if sess, ok := r["session"].(string); ok {
			attrs = append(attrs, attribute.String("mcp.session.id", sess))
		}
		_, span := tp.Tracer("mcp-server").Start(ctx, "tools/call "+params["name"].(string),
			trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
		if te, ok := r["transport_error"].(string); ok {
			span.SetAttributes(attribute.String("error.type", te))
			span.SetStatus(codes.Error, te)
		} else if resp, ok := r["response"].(map[string]any); ok {
			res := resp["result"].(map[string]any)
			b, _ := json.Marshal(res)
			span.SetAttributes(attribute.String("gen_ai.tool.call.result", string(b)))
			if res["isError"] == true {
				span.SetAttributes(attribute.String("error.type", "tool_error"))
				span.SetStatus(codes.Error, "tool error")
			}
		}
		ms, _ := r["duration_ms"].(float64)
		span.End(trace.WithTimestamp(start.Add(time.Duration(ms * float64(time.Millisecond)))))
	}
	for _, tp := range providers {
		if err := tp.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServe_OTLP replays the examples as spans made by the OpenTelemetry Go
// SDK, over OTLP/HTTP and over OTLP/gRPC, and expects analyze's findings.
func TestServe_OTLP(t *testing.T) {
	recs := mergedCapture(t)
	for _, transport := range []string{"http", "grpc"} {
		t.Run(transport, func(t *testing.T) {
			cfg := testConfig(t, t.TempDir())
			s := startTest(t, cfg)
			sendSpans(t, recs, func() (sdktrace.SpanExporter, error) {
				if transport == "grpc" {
					return otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(s.grpcAddr), otlptracegrpc.WithInsecure())
				}
				return otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(s.ingestAddr), otlptracehttp.WithInsecure())
			})
			waitFindings(t, s, analyzeFindings(t, cfg, ndjson(recs)))
		})
	}
}

// TestServe_Restart stops the server (gracefully) in the middle of the
// stream and starts it again on the same data: the findings equal an
// uninterrupted run, none twice, none lost.
func TestServe_Restart(t *testing.T) {
	t.Parallel() // serves on data dirs of their own
	recs := mergedCapture(t)
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	want := analyzeFindings(t, cfg, ndjson(recs))
	for _, cut := range []int{len(recs) / 3, len(recs) / 2} {
		t.Run(strconv.Itoa(cut), func(t *testing.T) {
			cfg := testConfig(t, t.TempDir())
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			s1, err := startServer(context.Background(), cfg, log)
			if err != nil {
				t.Fatal(err)
			}
			resp := postCalls(t, s1, ndjson(recs[:cut]), false)
			resp.Body.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s1.shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			s2 := startTest(t, cfg)
			resp = postCalls(t, s2, ndjson(recs[cut:]), false)
			resp.Body.Close()
			waitFindings(t, s2, want)
		})
	}
}

// TestServe_BadInput: each refusal gets its status and a clear message,
// and the good data beside bad records is kept.
func TestServe_BadInput(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Serve.Receiver.MaxBodyBytes = 64 << 10
	s := startTest(t, cfg)
	post := func(path, ctype, enc string, body []byte) (int, string, http.Header) {
		req, _ := http.NewRequest("POST", "http://"+s.ingestAddr+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		if enc != "" {
			req.Header.Set("Content-Encoding", enc)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	check := func(name string, code int, body string, wantCode int, wantText string) {
		t.Helper()
		if code != wantCode || !strings.Contains(body, wantText) {
			t.Errorf("%s: %d %q, want %d containing %q", name, code, body, wantCode, wantText)
		}
	}
	code, body, _ := post("/v1/traces", "application/x-protobuf", "", []byte("\xff\xff\xff garbage"))
	check("garbage protobuf", code, body, 400, "cannot decode OTLP protobuf")
	code, body, _ = post("/v1/traces", "text/csv", "", []byte("a,b"))
	check("wrong content type", code, body, 415, "Content-Type")
	code, body, _ = post("/v1/calls", "application/x-ndjson", "", bytes.Repeat([]byte("x"), 70<<10))
	check("oversize", code, body, 413, "larger than")
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	zw.Write(make([]byte, 50<<20))
	zw.Close()
	code, body, _ = post("/v1/calls", "application/x-ndjson", "gzip", bomb.Bytes())
	check("gzip bomb", code, body, 413, "after decompression")
	code, body, _ = post("/v1/calls", "application/x-ndjson", "gzip", []byte("not gzip"))
	check("bad gzip", code, body, 400, "gzip")

	recs := mergedCapture(t)[:3]
	mixed := append(append(ndjson(recs[:1]), []byte("{not json}\n{\"time\":\"2026-11-02T09:00:00Z\"}\n")...), ndjson(recs[1:])...)
	code, body, _ = post("/v1/calls", "application/x-ndjson", "", mixed)
	check("bad lines beside good ones", code, body, 200, `"accepted":3,"new":3,"rejected":2`)
	if !strings.Contains(body, "body:2: not JSON") || !strings.Contains(body, "body:3: field server: missing") {
		t.Errorf("rejections do not name line and reason: %s", body)
	}
	code, body, _ = post("/v1/calls", "application/x-ndjson", "", []byte("nope\n"))
	check("only bad lines", code, body, 400, "not JSON")

	// A span that cannot be used is a partial success; the others are kept.
	otlpBody := []byte(`{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"thegram"}}]},"scopeSpans":[{"spans":[
	 {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"x","kind":2,"startTimeUnixNano":"1793610005385999872","endTimeUnixNano":"1793610005485999872","attributes":[{"key":"mcp.method.name","value":{"stringValue":"tools/call"}}]},
	 {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060709","name":"y","kind":2,"startTimeUnixNano":"1793610005385999872","endTimeUnixNano":"1793610005485999872","attributes":[{"key":"mcp.method.name","value":{"stringValue":"tools/call"}},{"key":"gen_ai.tool.name","value":{"stringValue":"gram_projects"}}]}]}]}]}`)
	code, body, _ = post("/v1/traces", "application/json", "", otlpBody)
	check("partial success", code, body, 200, `"rejectedSpans":"1"`)
	if !strings.Contains(body, "without gen_ai.tool.name") {
		t.Errorf("partial success without reason: %s", body)
	}

	// Unknown config keys are named with their path.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("serve:\n  ingest_listen: \":1\"\n  recevier: {}\n"), 0o644)
	var out, errb bytes.Buffer
	if c := run(context.Background(), []string{"config", "validate", bad}, nil, &out, &errb); c != 2 || !strings.Contains(errb.String(), "recevier") {
		t.Errorf("config validate: %d %q", c, errb.String())
	}
	good := filepath.Join(t.TempDir(), "good.yaml")
	os.WriteFile(good, []byte("serve:\n  retention: 7d\n  receiver:\n    max_body_bytes: ${MCPAUDIT_TEST_MAX}\ndetect:\n  verify_window: 2m\n"), 0o644)
	t.Setenv("MCPAUDIT_TEST_MAX", "1048576")
	if c := run(context.Background(), []string{"config", "validate", good}, nil, &out, &errb); c != 0 {
		t.Errorf("valid config refused: %q", errb.String())
	}
	cfgGood, err := LoadConfig(good)
	if err != nil || cfgGood.Serve.Receiver.MaxBodyBytes != 1<<20 || cfgGood.Serve.Retention.D() != 7*24*time.Hour {
		t.Errorf("config not read: %+v %v", cfgGood.Serve, err)
	}
}

// TestServe_QueueFull: when the detector's queue is full the request is
// refused with 429 and Retry-After, and nothing of it is stored.
func TestServe_QueueFull(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Serve.Pipeline.QueueCalls = 2
	s := startTest(t, cfg)
	resp := postCalls(t, s, ndjson(mergedCapture(t)[:5]), false)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}
	n := 0
	s.store.ScanCalls(context.Background(), time.Time{}, func(*audit.Record) error { n++; return nil })
	if n != 0 {
		t.Fatalf("%d calls stored from a refused request", n)
	}
}

// scrapeMetrics returns the exposition text of the server's /metrics.
func scrapeMetrics(t *testing.T, s *server) string {
	t.Helper()
	r, err := http.Get("http://" + s.apiAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s %v", r.Status, err)
	}
	return string(b)
}

// TestServe_StoreFaults: the embedded store's faults are exported from the
// start, at zero, and only the faults that store can have.
func TestServe_StoreFaults(t *testing.T) {
	s := startTest(t, testConfig(t, t.TempDir()))
	text := scrapeMetrics(t, s)
	for _, want := range []string{
		`mcpaudit_store_faults_total{fault="id_index_write"} 0`,
		`mcpaudit_store_faults_total{fault="id_index_corrupt"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, f := range []string{"spool_file_rejected", "spool_tail_cut"} {
		if strings.Contains(text, `fault="`+f+`"`) {
			t.Errorf("the embedded store exports %s, a fault of the ClickHouse store", f)
		}
	}
	if strings.Contains(text, "mcpaudit_spool_files_set_aside") || strings.Contains(text, "mcpaudit_spool_bytes") {
		t.Error("the embedded store exports the spool's gauges; it has no spool")
	}

	// With ack "log" its call log is a spool: the same faults and gauges
	// as the ClickHouse store's.
	cfg := testConfig(t, t.TempDir())
	cfg.Serve.SQLite.Ack = sqlite.AckLog
	s = startTest(t, cfg)
	text = scrapeMetrics(t, s)
	for _, want := range []string{
		`mcpaudit_store_faults_total{fault="id_index_write"} 0`,
		`mcpaudit_store_faults_total{fault="spool_file_rejected"} 0`,
		`mcpaudit_store_faults_total{fault="spool_tail_cut"} 0`,
		`mcpaudit_spool_files_set_aside{file="rejected"} 0`,
		"mcpaudit_spool_bytes 0",
		"mcpaudit_spool_limit_bytes 1.073741824e+09",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("ack log: /metrics lacks %s", want)
		}
	}
}

// TestServe_ListenerTaken: a listen address already in use is refused
// naming the address and the key and flag that set it, so that the
// operator knows which of the three listeners to move.
func TestServe_ListenerTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Serve.IngestListen = taken.Addr().String() }, "serve.ingest_listen, --ingest-listen"},
		{func(c *Config) { c.Serve.GRPCListen = taken.Addr().String() }, "serve.grpc_listen, --grpc-listen"},
		{func(c *Config) { c.Serve.APIListen = taken.Addr().String() }, "serve.api_listen, --api-listen"},
	} {
		cfg := testConfig(t, t.TempDir())
		tc.set(&cfg)
		s, err := startServer(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err == nil {
			s.shutdown(context.Background())
			t.Fatalf("%s: started on a taken address", tc.want)
		}
		if !strings.Contains(err.Error(), taken.Addr().String()) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %q: want the address %s and %q", err, taken.Addr(), tc.want)
		}
	}
}

// TestServe_StopLogsCleanStop: a stop (SIGTERM) ends the log with one line
// that says serve stopped cleanly and what the stop flushed, written after
// the store is closed and the state file saved; before, the log ended at
// "shutting down", and an operator could not tell a clean stop from one
// killed halfway (found by op17).
func TestServe_StopLogsCleanStop(t *testing.T) {
	dir := t.TempDir()
	api, ingest := freePort(t), freePort(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- serveCommand(ctx, []string{"--data-dir", dir, "--api-listen", api, "--ingest-listen", ingest, "--grpc-listen", ""}, &stderr)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + api + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready after 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	recs := mergedCapture(t)
	servers := map[string]bool{}
	for _, r := range recs {
		servers[r["server"].(string)] = true
	}
	postAs(t, ingest, "test", ndjson(recs))
	stop() // as signal.NotifyContext does on SIGTERM
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr.String())
	}

	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	var last struct {
		Level, Msg       string
		CallsTakenAtStop int64     `json:"calls_taken_at_stop"`
		CallsWaiting     int       `json:"calls_waiting"`
		Partitions       int       `json:"partitions"`
		Store            string    `json:"store"`
		StateFile        string    `json:"state_file"`
		StateSaved       time.Time `json:"state_saved"`
		LoggedAt         time.Time `json:"time"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Level != "INFO" || last.Msg != "stopped cleanly" {
		t.Fatalf("the log's last line is %s, want INFO stopped cleanly", lines[len(lines)-1])
	}
	var shutting time.Time
	for _, l := range lines {
		var e struct {
			Msg  string
			Time time.Time
		}
		if json.Unmarshal([]byte(l), &e) == nil && e.Msg == "shutting down" {
			shutting = e.Time
		}
	}
	if shutting.IsZero() {
		t.Fatalf("no shutting down line:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err != nil {
		t.Fatalf("state file: %v", err)
	}
	if last.StateFile != filepath.Join(dir, stateFile) || last.StateSaved.Before(shutting) || last.StateSaved.After(last.LoggedAt) {
		t.Errorf("state file %q saved %v, want %q saved at the stop (between %v and %v)",
			last.StateFile, last.StateSaved, filepath.Join(dir, stateFile), shutting, last.LoggedAt)
	}
	if last.Partitions != len(servers) || last.CallsWaiting < 0 || last.CallsWaiting > len(recs) ||
		last.CallsTakenAtStop < 0 || last.CallsTakenAtStop > int64(len(recs)) || last.Store != "sqlite" {
		t.Errorf("stopped: %d partitions, %d calls waiting, %d taken at the stop, store %q; want %d partitions (%v), at most %d calls, sqlite",
			last.Partitions, last.CallsWaiting, last.CallsTakenAtStop, last.Store, len(servers), servers, len(recs))
	}
	t.Logf("%s", lines[len(lines)-1])
	// The store is closed and the data dir released: a new serve opens it.
	s, err := startServer(context.Background(), testConfig(t, dir), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("cannot start again on the data dir: %v", err)
	}
	if err := s.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
