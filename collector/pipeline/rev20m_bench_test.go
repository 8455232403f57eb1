package pipeline_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// BenchmarkRev20m_ClockAheadPolled (rev20m, reviewing mem20) is
// BenchmarkRev19d_OneCopyPolled live, with the key's applies sent by two
// pods: one with a right clock, one whose clock runs an hour ahead (past
// max_clock_skew: its calls are judged at once, at their place an hour
// past the watermark). mem20 folds a key's uses more than
// allowed_lateness behind the watermark; the ahead pod's are never that
// far behind while the wall clock has not caught up, so they stay, and
// each call of the right pod (behind them: late) judges them all again.
// ns/call growing with n is that cost, as before mem20 (rev19d's D3);
// ahead=0s, both pods' clocks right, is the same calls without it:
//
//	go test ./collector/pipeline -run '^$' -bench Rev20m_ClockAheadPolled -benchtime 1x
func BenchmarkRev20m_ClockAheadPolled(b *testing.B) {
	for _, c := range []struct {
		n     int
		ahead time.Duration
	}{{500, time.Hour}, {1000, time.Hour}, {2000, time.Hour}, {500, 0}, {1000, 0}, {2000, 0}} {
		n := c.n
		b.Run(fmt.Sprintf("ahead=%v/%d", c.ahead, n), func(b *testing.B) {
			t0 := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
			lines := make([][]byte, 2*n)
			for i := range n {
				at := t0.Add(time.Duration(i) * 2 * time.Second)
				ahead := at.Add(c.ahead)
				lines[2*i] = copyCallAt("op_polled", 2*i+1, ahead, "applyDocumentCopy", ahead.Add(time.Minute))
				lines[2*i+1] = copyCallAt("op_polled", 2*i+2, at, "applyDocumentCopy", at.Add(time.Minute))
			}
			recs := decode(b, lines)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for range b.N {
				e := detect.NewEngine(detect.NewDefaultConfig(), judgedSink{&judged{findings: map[string]string{}, writes: map[string]audit.WriteState{}}})
				e.ClockPerPartition()
				for i, r := range recs {
					wall := t0.Add(time.Duration(i/2) * 2 * time.Second)
					src := "otlp:right"
					if i%2 == 0 {
						src = "otlp:ahead"
					}
					e.Add(src, r, wall)
					e.Tick(wall)
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(e)
				b.StartTimer()
				e.Flush()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2*n), "ns/call")
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(2*n), "heapB/call")
		})
	}
}
