package tap

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkRecorder_Pair is the Recorder's cost per call: a tools/call and
// its answer paired, with 100 others in flight (adv23a queued the requests
// under each id; docs/benchmarks.md, "the Recorder's queues").
func BenchmarkRecorder_Pair(b *testing.B) {
	r := NewRecorder("thegram", func(*Record) {})
	t0 := time.Date(2026, 12, 6, 19, 0, 0, 0, time.UTC)
	call := func(i int) []Message {
		m, _ := Parse([]byte(`{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"a.gram"}}}`))
		return m
	}
	resp := func(i int) []Message {
		m, _ := Parse([]byte(`{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"result":{"content":[]}}`))
		return m
	}
	for i := range 100 {
		r.FromClient("s", 0, call(-1-i), t0)
	}
	calls, resps := make([][]Message, 1024), make([][]Message, 1024)
	for i := range calls {
		calls[i], resps[i] = call(i), resp(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		j := i % len(calls)
		r.FromClient("s", 0, calls[j], t0)
		r.FromServer("s", 0, resps[j], t0)
	}
	if r.Len() != 100 {
		b.Fatalf("%d in flight, want 100", r.Len())
	}
}
