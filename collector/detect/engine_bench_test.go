package detect_test

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
	"github.com/mcpaudit/mcpaudit/internal/procstat"
)

// BenchmarkEngine times the engine alone (Engine.Add and Flush) on a
// generated mixed capture decoded beforehand, as analyze feeds it: the
// records' dialect reading is done outside the timer, so that a change to
// the engine's plumbing shows apart from the reading's cost. Reports
// allocations and CPU per call:
//
//	GOMAXPROCS=1 go test ./collector/detect -run '^$' -bench '^BenchmarkEngine$' -benchmem -benchtime 5x
func BenchmarkEngine(b *testing.B) {
	c := capgen.Generate(capgen.Config{Seed: 7, Sessions: 30_000, Span: 24 * time.Hour, AnomalyRate: 0.1, NoiseRate: 0.002})
	data := bytes.Join(c.Lines, []byte("\n"))
	c.Lines = nil
	var cpu time.Duration
	calls := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		d := newRunner(detect.NewDefaultConfig(), &discard{})
		dec, err := capture.NewDecoder(bytes.NewReader(data), "mixed")
		if err != nil {
			b.Fatal(err)
		}
		dec.DropPayloads()
		var recs []*audit.Record
		for {
			r, err := dec.NextRecord(d.r)
			if err == io.EOF {
				break
			}
			if err != nil {
				if !capture.IsReject(err) {
					b.Fatal(err)
				}
				continue
			}
			r.Call.Arguments, r.Call.Result = nil, nil
			recs = append(recs, r)
		}
		calls += len(recs)
		b.StartTimer()
		cpu0 := procstat.CPU()
		for _, r := range recs {
			d.e.Add("input", r, time.Time{})
		}
		d.e.Flush()
		cpu += procstat.CPU() - cpu0
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(calls), "cpu-ns/call")
	b.ReportMetric(float64(calls)/float64(b.N), "calls/op")
}

// BenchmarkEngine_Waiting times Add and Flush of lean records, as serve
// keeps them, where every call waits for its partition's watermark (the
// first call of each partition comes from a source that sends nothing
// more, as in BenchmarkWaiting): "packed" as serve keeps waiting calls
// (Engine.PackWaiting: each is packed when it waits and unpacked to be
// judged), "lean" unpacked. Reports CPU and allocations per call:
//
//	GOMAXPROCS=1 go test ./collector/detect -run '^$' -bench 'Engine_Waiting' -benchmem -benchtime 3x
func BenchmarkEngine_Waiting(b *testing.B) {
	b.Run("lean", func(b *testing.B) { benchmarkEngineWaiting(b, false) })
	b.Run("packed", func(b *testing.B) { benchmarkEngineWaiting(b, true) })
}

func benchmarkEngineWaiting(b *testing.B, packed bool) {
	recs := leanTraffic(b, 10)
	var posters [16]string
	for i := range posters {
		posters[i] = "poster-" + string(rune('a'+i))
	}
	var cpu time.Duration
	calls := 0
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		// Add changes a record (its call's fingerprint when it has none):
		// each round gets copies.
		held := make([]*audit.Record, len(recs))
		for i, r := range recs {
			c := *r.Call
			l := *r
			l.Call = &c
			held[i] = &l
		}
		e := detect.NewEngine(detect.NewDefaultConfig(), discardSink{})
		e.ClockPerPartition()
		if packed {
			e.PackWaiting()
		}
		stuck := map[detect.PartitionKey]bool{}
		b.StartTimer()
		cpu0 := procstat.CPU()
		for i, r := range held {
			k := detect.PartitionKey{Tenant: r.Call.Tenant, Server: r.Call.Server}
			if !stuck[k] {
				stuck[k] = true
				e.Add("stuck", r, time.Time{})
				continue
			}
			e.Add(posters[i%16], r, time.Time{})
		}
		e.Flush()
		cpu += procstat.CPU() - cpu0
		calls += len(held)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(calls), "cpu-ns/call")
}
