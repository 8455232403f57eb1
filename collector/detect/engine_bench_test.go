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
