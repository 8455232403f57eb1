package capgen

import "testing"

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
