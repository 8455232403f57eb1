package capgen

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// BenchmarkStream generates calls and writes each as a call record, as
// the load command does, and reports the cost per call.
//
//	go test ./internal/capgen -run '^$' -bench Stream -benchmem
func BenchmarkStream(b *testing.B) {
	s := NewStream(Config{Seed: 1, Sessions: 1 << 40, AnomalyRate: 0.1, NoiseRate: 0.001, Span: 1 << 62})
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		c, _ := s.Next()
		buf = c.AppendRecord(buf[:0])
	}
	b.ReportMetric(float64(s.MaxHeld()), "max-held")
}

// BenchmarkOTLPRequest generates calls and builds and marshals OTLP
// export requests of 512 spans, as the load command's OTLP forms do; the
// cost is per call.
//
//	go test ./internal/capgen -run '^$' -bench OTLPRequest -benchmem
func BenchmarkOTLPRequest(b *testing.B) {
	s := NewStream(Config{Seed: 1, Sessions: 1 << 40, AnomalyRate: 0.1, NoiseRate: 0.001, Span: 1 << 62})
	calls := make([]*Call, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		c, _ := s.Next()
		if calls = append(calls, c); len(calls) == 512 {
			req := ptraceotlp.NewExportRequest()
			AppendTraces(req.Traces(), "loadgen-0", calls)
			if _, err := req.MarshalProto(); err != nil {
				b.Fatal(err)
			}
			calls = calls[:0]
		}
	}
}
