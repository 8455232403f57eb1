package receiver_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/collector/redact"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
	"github.com/prometheus/client_golang/prometheus"
)

// countIngester acknowledges every call at once, so that a benchmark
// measures the receiver alone.
type countIngester struct{ n int }

func (c *countIngester) Ingest(_ context.Context, batches ...audit.Batch) (int, error) {
	for _, b := range batches {
		c.n += len(b.Records)
	}
	return 0, nil
}

// benchReceiver is a receiver as serve builds it by default (metrics,
// redaction on, no credentials) in front of countIngester.
func benchReceiver(b *testing.B) (*receiver.Receiver, *countIngester) {
	in := &countIngester{}
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	if err != nil {
		b.Fatal(err)
	}
	rc := receiver.New(receiver.NewDefaultConfig(), dialect.Config{}, in, m, slog.New(slog.DiscardHandler))
	if rc.Redactor, err = redact.New(redact.NewDefaultConfig(), []byte("0123456789abcdef")); err != nil {
		b.Fatal(err)
	}
	return rc, in
}

// benchCalls returns n requests of batch generated calls each, as
// loadgen --live=false makes them.
func benchCalls(n, batch int) [][]*capgen.Call {
	s := capgen.NewStream(capgen.Config{Seed: 1, Sessions: 1 << 40, AnomalyRate: 0.1, NoiseRate: 0.001, Span: 1 << 62})
	out := make([][]*capgen.Call, n)
	for i := range out {
		for range batch {
			c, _ := s.Next()
			out[i] = append(out[i], c)
		}
	}
	return out
}

// BenchmarkGRPCExport measures the receiver's CPU and allocations per
// call for OTLP/gRPC requests of 512 spans, from the message's bytes as
// the gRPC server hands them to its codec to the batches handed to the
// pipeline: the depth check, reading the spans, checks, masking, grouping.
// The pipeline and the store are left out (countIngester).
//
//	go test ./collector/receiver -run '^$' -bench GRPCExport -benchmem
func BenchmarkGRPCExport(b *testing.B) {
	rc, in := benchReceiver(b)
	bodies := benchBodies(b, ptraceotlp.ExportRequest.MarshalProto)
	benchExport(b, rc, in, bodies)
}

// BenchmarkGRPCExportDeepSpan is BenchmarkGRPCExport with span 0 of each
// request holding a value nested 200 deep: the cost of rejecting that
// span alone (the depth walk again, per resource, scope and span, and a
// copy of the message without it) on top of reading the 511 others.
//
//	go test ./collector/receiver -run '^$' -bench GRPCExportDeepSpan -benchmem
func BenchmarkGRPCExportDeepSpan(b *testing.B) {
	rc, in := benchReceiver(b)
	bodies := benchBodies(b, func(req ptraceotlp.ExportRequest) ([]byte, error) {
		sp := req.Traces().ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
		nestSlice(sp.Attributes(), "deep", 200)
		return req.MarshalProto()
	})
	benchExport(b, rc, in, bodies)
}

// benchExport hands rc the bodies in turn, as gRPC's handler does, and
// reports the time per call and the calls per request.
func benchExport(b *testing.B, rc *receiver.Receiver, in *countIngester, bodies [][]byte) {
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := rc.ExportMessage(ctx, bodies[i%len(bodies)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(in.n), "ns/call")
	b.ReportMetric(float64(in.n)/float64(i), "calls/op")
}

// benchBodies returns 16 OTLP Export requests of 512 spans, encoded by
// marshal (MarshalProto, as OTLP/gRPC messages; or MarshalJSON).
func benchBodies(b *testing.B, marshal func(ptraceotlp.ExportRequest) ([]byte, error)) [][]byte {
	var bodies [][]byte
	for _, calls := range benchCalls(16, 512) {
		req := ptraceotlp.NewExportRequest()
		capgen.AppendTraces(req.Traces(), "bench", calls)
		body, err := marshal(req)
		if err != nil {
			b.Fatal(err)
		}
		bodies = append(bodies, body)
	}
	return bodies
}

// BenchmarkGRPCExportPdata is BenchmarkGRPCExport with every message
// decoded by pdata and read from its decoding, as the receiver does with
// a message otlp.CheckProto leaves to pdata (and did with all before).
//
//	go test ./collector/receiver -run '^$' -bench GRPCExportPdata -benchmem
func BenchmarkGRPCExportPdata(b *testing.B) {
	rc, in := benchReceiver(b)
	bodies := benchBodies(b, ptraceotlp.ExportRequest.MarshalProto)
	g := rc.GRPCServer()
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(bodies[i%len(bodies)]); err != nil {
			b.Fatal(err)
		}
		if _, err := g.Export(ctx, req); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(in.n), "ns/call")
	b.ReportMetric(float64(in.n)/float64(i), "calls/op")
}

// BenchmarkCalls measures the receiver's CPU and allocations per call for
// POST /v1/calls of 200 NDJSON call records, as loadgen sends them.
//
//	go test ./collector/receiver -run '^$' -bench 'Calls$' -benchmem
func BenchmarkCalls(b *testing.B) {
	rc, in := benchReceiver(b)
	var bodies [][]byte
	for _, calls := range benchCalls(16, 200) {
		var body []byte
		for i, c := range calls {
			if i > 0 {
				body = append(body, '\n')
			}
			body = c.AppendRecord(body)
		}
		bodies = append(bodies, body)
	}
	benchPost(b, rc, in, "/v1/calls", "application/x-ndjson", bodies)
}

// benchPost posts bodies of contentType to path in turn, as the source
// "bench", each answered 200, and reports the time per call.
func benchPost(b *testing.B, rc *receiver.Receiver, in *countIngester, path, contentType string, bodies [][]byte) {
	h := rc.Handler()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req := httptest.NewRequest("POST", path, bytes.NewReader(bodies[i%len(bodies)]))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set(receiver.SourceHeader, "bench")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(in.n), "ns/call")
	b.ReportMetric(float64(in.n)/float64(i), "calls/op")
}
