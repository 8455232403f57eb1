package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestSpanAndRecord_OneCall: one exchange seen as an OTLP span (made by
// the OpenTelemetry Go SDK) and as a call record with the span's trace_id
// and span_id, neither with a JSON-RPC id, is one call
// (docs/detection.md, "Duplicates"): serve stores it once and judges it
// once, and analyze of the records, of the spans and of both finds the
// same findings under the same ids. Until rec50 the record took its call
// id from the empty JSON-RPC id and the span from its span: serve stored
// both, and the findings of the two carriers had other ids.
func TestSpanAndRecord_OneCall(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../testdata/examples/thegram-both-succeeded-double-apply.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatal(err)
		}
		delete(m["request"].(map[string]any), "id")
		if resp, ok := m["response"].(map[string]any); ok {
			delete(resp, "id")
		}
		recs = append(recs, m)
	}
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	s := startTest(t, cfg)

	// The SDK exports each span to serve and, the same spans, to a
	// listener that keeps its bodies for analyze.
	var mu sync.Mutex
	var bodies [][]byte
	keep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, body)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer keep.Close()
	ctx := context.Background()
	toServe, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(s.ingestAddr), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	toKeep, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(keep.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(toServe), sdktrace.WithSyncer(toKeep),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "thegram"))))
	for _, r := range recs {
		start, _ := time.Parse(time.RFC3339Nano, r["time"].(string))
		params := r["request"].(map[string]any)["params"].(map[string]any)
		args, _ := json.Marshal(params["arguments"])
		_, span := tp.Tracer("mcp-server").Start(ctx, "tools/call "+params["name"].(string), trace.WithSpanKind(trace.SpanKindServer),
			trace.WithTimestamp(start), trace.WithAttributes(attribute.String("mcp.method.name", "tools/call"),
				attribute.String("gen_ai.tool.name", params["name"].(string)), attribute.String("mcp.session.id", r["session"].(string)),
				attribute.String("gen_ai.tool.call.arguments", string(args))))
		res, _ := json.Marshal(r["response"].(map[string]any)["result"])
		span.SetAttributes(attribute.String("gen_ai.tool.call.result", string(res)))
		if strings.Contains(string(res), `"isError":true`) {
			span.SetAttributes(attribute.String("error.type", "tool_error"))
			span.SetStatus(codes.Error, "tool error")
		}
		sc := span.SpanContext()
		r["trace_id"], r["span_id"] = sc.TraceID().String(), sc.SpanID().String()
		ms, _ := r["duration_ms"].(float64)
		span.End(trace.WithTimestamp(start.Add(time.Duration(ms * float64(time.Millisecond)))))
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	records := ndjson(recs)
	// The records come after the spans were acknowledged: each is a second
	// observation of a stored call.
	postBody(t, s, "/v1/calls", "application/x-ndjson", records)

	var otlpJSON [][]byte
	for _, body := range bodies {
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			t.Fatal(err)
		}
		j, err := req.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		otlpJSON = append(otlpJSON, j)
	}
	if len(otlpJSON) != len(recs) {
		t.Fatalf("%d OTLP bodies kept for %d spans", len(otlpJSON), len(recs))
	}

	// analyze: each carrier alone, and both, give the same findings, and
	// both together are the calls of one.
	want := analyzeCaptures(t, cfg, [][]byte{records})
	if len(want) == 0 {
		t.Fatal("the capture gives no finding: the comparison would prove nothing")
	}
	sameFindings(t, "analyze of the spans", analyzeCaptures(t, cfg, otlpJSON), want)
	sameFindings(t, "analyze of the records and the spans", analyzeCaptures(t, cfg, append([][]byte{records}, otlpJSON...)), want)
	in := filepath.Join(t.TempDir(), "records.ndjson")
	if err := os.WriteFile(in, records, 0o600); err != nil {
		t.Fatal(err)
	}
	names := []string{in}
	for i, j := range otlpJSON {
		n := filepath.Join(filepath.Dir(in), "spans"+string(rune('a'+i))+".json")
		if err := os.WriteFile(n, j, 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	a := newAnalyzer(cfg, findingSink(func(*audit.Finding) {}))
	var rejects rejectLog
	if err := analyzeInputs(ctx, names, nil, a, &rejects, new(atomic.Int64)); err != nil {
		t.Fatal(err)
	}
	a.eng.Flush()
	if st := a.eng.Stats(); st.Calls != int64(len(recs)) || st.Duplicates != int64(len(recs)) {
		t.Errorf("analyze of both carriers: %d calls and %d duplicates, want %d and %d", st.Calls, st.Duplicates, len(recs), len(recs))
	}

	// serve: the findings of one carrier, each call stored once, judged
	// once, the records counted as duplicates.
	waitFindings(t, s, want)
	if n, _ := storedCalls(t, s); n != len(recs) {
		t.Errorf("serve stored %d calls of %d exchanges", n, len(recs))
	}
	// Counts of judged calls are released to /metrics once committed: a
	// scrape may come before.
	var judged, dup float64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := parser.TextToMetricFamilies(strings.NewReader(scrapeMetrics(t, s)))
		if err != nil {
			t.Fatal(err)
		}
		judged, dup = 0, 0
		for _, m := range mfs["mcpaudit_tool_calls_total"].GetMetric() {
			judged += m.GetCounter().GetValue()
		}
		for _, m := range mfs["mcpaudit_ingest_records_total"].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["source"] == "calls_http" && labels["result"] == "duplicate" {
				dup = m.GetCounter().GetValue()
			}
		}
		if judged >= float64(len(recs)) && dup >= float64(len(recs)) || time.Now().After(deadline) {
			break
		}
	}
	if judged != float64(len(recs)) || dup != float64(len(recs)) {
		t.Errorf("serve judged %v calls and counted %v records as duplicates, want %d and %d", judged, dup, len(recs), len(recs))
	}
}
