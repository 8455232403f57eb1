package detect_test

import (
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// BenchmarkOpenState feeds a minute of live traffic at 10,000 calls a second
// (a generated mixed capture, the calls lean as the live service keeps
// them) through an engine, and reports the heap it holds at the end, per
// call, per open correlation key and per call waiting for its watermark:
//
//	go test ./collector/detect -run '^$' -bench OpenState -benchtime 1x
func BenchmarkOpenState(b *testing.B) {
	recs := leanTraffic(b, 60)
	b.ResetTimer()
	for range b.N {
		held := make([]*audit.Record, len(recs))
		copy(held, recs)
		recs = nil
		n := len(held)
		// As in serve.
		e := detect.NewEngine(detect.NewDefaultConfig(), discardSink{})
		// Sixteen posters, each its share of the calls in order, arriving
		// a second after their time.
		for i, r := range held {
			held[i] = nil
			e.Add("poster-"+string(rune('a'+i%16)), r, r.Call.Time.Add(time.Second))
		}
		held = nil
		with := heapInUse()
		if path := os.Getenv("MCPAUDIT_HEAP_PROFILE"); path != "" {
			// The engine's heap, for go tool pprof -sample_index=inuse_space.
			if f, err := os.Create(path); err == nil {
				pprof.WriteHeapProfile(f)
				f.Close()
			}
		}
		keys, buffered := e.OpenKeys(), e.Buffered()
		runtime.KeepAlive(e)
		e = nil
		retained := float64(with - heapInUse())
		b.ReportMetric(retained/float64(n), "B/call")
		b.ReportMetric(retained/float64(keys), "B/open-key")
		b.ReportMetric(float64(keys), "open-keys")
		b.ReportMetric(float64(buffered), "buffered")
		b.ReportMetric(retained/(1<<20), "MiB")
	}
}

// BenchmarkWaiting reports the heap held per call waiting for its
// partition's watermark: the same traffic as BenchmarkOpenState, but the
// first call of each partition comes from a source that sends nothing
// more and never goes idle (no wall clock, as in analyze), so that every
// other call waits, as behind a lagging exporter in serve; "packed" as
// serve keeps them (Engine.PackWaiting), "lean" as analyze does:
//
//	go test ./collector/detect -run '^$' -bench Waiting -benchtime 1x
func BenchmarkWaiting(b *testing.B) {
	b.Run("lean", func(b *testing.B) { benchmarkWaiting(b, false) })
	b.Run("packed", func(b *testing.B) { benchmarkWaiting(b, true) })
}

func benchmarkWaiting(b *testing.B, packed bool) {
	recs := leanTraffic(b, 20)
	b.ResetTimer()
	for range b.N {
		held := make([]*audit.Record, len(recs))
		copy(held, recs)
		recs = nil
		e := detect.NewEngine(detect.NewDefaultConfig(), discardSink{})
		e.ClockPerPartition()
		if packed {
			e.PackWaiting()
		}
		stuck := map[detect.PartitionKey]bool{}
		for i, r := range held {
			held[i] = nil
			k := detect.PartitionKey{Tenant: r.Call.Tenant, Server: r.Call.Server}
			if !stuck[k] {
				stuck[k] = true
				e.Add("stuck", r, time.Time{})
				continue
			}
			e.Add("poster-"+string(rune('a'+i%16)), r, time.Time{})
		}
		held = nil
		with := heapInUse()
		if path := os.Getenv("MCPAUDIT_HEAP_PROFILE"); path != "" {
			if f, err := os.Create(path); err == nil {
				pprof.WriteHeapProfile(f)
				f.Close()
			}
		}
		buffered := e.Buffered()
		runtime.KeepAlive(e)
		e = nil
		retained := float64(with - heapInUse())
		b.ReportMetric(retained/float64(buffered), "B/waiting-call")
		b.ReportMetric(float64(buffered), "buffered")
		b.ReportMetric(retained/(1<<20), "MiB")
	}
}

// leanTraffic returns seconds of a generated mixed capture at 10,000 calls
// a second, its records lean as the live service keeps them.
func leanTraffic(b *testing.B, seconds int) []*audit.Record {
	const rate = 10_000
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	c := capgen.Generate(capgen.Config{Seed: 3, Sessions: rate * seconds * 10 / 27, Start: start, Span: time.Duration(seconds) * time.Second, AnomalyRate: 0.1, NoiseRate: 0.0001})
	recs := readRecords(b, c.Lines)
	c.Lines = nil
	for i, r := range recs {
		recs[i] = r.Lean()
	}
	return recs
}

type discardSink struct{}

func (discardSink) Call(*audit.Record)                   {}
func (discardSink) Write(*audit.Write, audit.WriteState) {}
func (discardSink) Finding(*audit.Finding)               {}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
