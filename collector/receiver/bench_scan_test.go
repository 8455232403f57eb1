package receiver

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// BenchmarkJSONBodyScan measures the depth and end check of an OTLP JSON
// body of 512 generated spans, alone.
//
//	go test ./collector/receiver -run '^$' -bench JSONBodyScan -benchmem
func BenchmarkJSONBodyScan(b *testing.B) {
	s := capgen.NewStream(capgen.Config{Seed: 1, Sessions: 1 << 40, AnomalyRate: 0.1, NoiseRate: 0.001, Span: 1 << 62})
	var calls []*capgen.Call
	for range 512 {
		c, _ := s.Next()
		calls = append(calls, c)
	}
	req := ptraceotlp.NewExportRequest()
	capgen.AppendTraces(req.Traces(), "bench", calls)
	body, err := req.MarshalJSON()
	if err != nil {
		b.Fatal(err)
	}
	limit := jsonBodyDepth(NewDefaultConfig().MaxDepth)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if d, _, end := jsonScan(body, limit); d > limit || end != len(body) {
			b.Fatalf("depth %d, end %d of %d", d, end, len(body))
		}
	}
}
