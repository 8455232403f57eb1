package sqlite

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/procstat"
)

// BenchmarkAppendGrown measures one sequential client with batches of 512
// (as AppendCalls/sequential512) on a store that already holds
// MCPAUDIT_BENCH_STORED calls (default 1,000,000), stored first by 8
// goroutines with batches of 500: an index on random keys costs more as it
// grows past the page cache, one appended at its right edge does not. It
// reports the prefill's rate too.
//
//	go test -run '^$' -bench AppendGrown -benchtime 100x ./exporter/sqlite/
func BenchmarkAppendGrown(b *testing.B) {
	stored := 1000000
	if v := os.Getenv("MCPAUDIT_BENCH_STORED"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		stored = n
	}
	recs := pool(b, 20000)
	s := openTemp(b, Options{})
	defer s.Close()
	ctx := context.Background()
	const fill = 500
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]audit.Record, fill)
			for {
				j := next.Add(1) - 1
				if j*fill >= int64(stored) {
					return
				}
				for i := range buf {
					n := uint64(j)*fill + uint64(i)
					buf[i] = fresh(recs[n%uint64(len(recs))], n)
				}
				if _, err := s.AppendCalls(ctx, buf); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	prefill := time.Since(start)

	const batch = 512
	lat := make([]time.Duration, b.N)
	buf := make([]audit.Record, batch)
	cpu0, io0 := procstat.CPU(), procstat.Written()
	b.ResetTimer()
	for j := range b.N {
		for i := range buf {
			n := uint64(stored) + uint64(j)*batch + uint64(i)
			buf[i] = fresh(recs[n%uint64(len(recs))], n)
		}
		t := time.Now()
		if _, err := s.AppendCalls(ctx, buf); err != nil {
			b.Fatal(err)
		}
		lat[j] = time.Since(t)
	}
	b.StopTimer()
	calls := float64(b.N * batch)
	b.ReportMetric(float64(stored)/prefill.Seconds(), "prefill-calls/s")
	b.ReportMetric(float64(procstat.CPU()-cpu0)/1e3/calls, "cpu-µs/call")
	b.ReportMetric(float64(procstat.Written()-io0)/calls, "written-B/call")
	b.ReportMetric(calls/b.Elapsed().Seconds(), "calls/s")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "ack-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "ack-p99-ms")
}
