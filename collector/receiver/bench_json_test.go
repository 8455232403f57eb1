package receiver_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// BenchmarkTracesJSON measures the receiver's CPU and allocations per call
// for POST /v1/traces of OTLP JSON requests of 512 spans: the body's
// depth and end check, pdata's decoding, reading the spans, checks,
// masking, grouping. The pipeline and the store are left out
// (countIngester).
//
//	go test ./collector/receiver -run '^$' -bench TracesJSON -benchmem
func BenchmarkTracesJSON(b *testing.B) {
	rc, in := benchReceiver(b)
	var bodies [][]byte
	for _, calls := range benchCalls(16, 512) {
		req := ptraceotlp.NewExportRequest()
		capgen.AppendTraces(req.Traces(), "bench", calls)
		body, err := req.MarshalJSON()
		if err != nil {
			b.Fatal(err)
		}
		bodies = append(bodies, body)
	}
	h := rc.Handler()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req := httptest.NewRequest("POST", "/v1/traces", bytes.NewReader(bodies[i%len(bodies)]))
		req.Header.Set("Content-Type", "application/json")
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
