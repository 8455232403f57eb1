package clickhouse

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// BenchmarkDrainBacklog measures the drain alone: a backlog of 200 spooled
// batches of 512 generated calls (appended while ClickHouse cannot be
// reached, as in an outage), then drained into ClickHouse at the next
// start. It reports the calls inserted per second from Open until the
// spool is empty, and the largest Go heap in use meanwhile (sampled every
// 5 ms, less the heap before Open: the backlog's records are dropped
// first), with drain_bytes 0 (four batch sizes of rows per insert) and 16
// MiB (what serve sets under a memory_limit of 256MiB):
//
//	go test -run '^$' -bench DrainBacklog -benchtime 1x ./exporter/clickhouse/
func BenchmarkDrainBacklog(b *testing.B) {
	serverDSN(b)
	pool := benchPool(b, 20000)
	for _, db := range []int64{0, 16 << 20} {
		b.Run(fmt.Sprintf("drain_bytes=%d", db), func(b *testing.B) {
			o := testOptions(b)
			o.Ack, o.DrainBytes = AckLog, db
			drainBacklog(b, o, pool)
		})
	}
}

func drainBacklog(b *testing.B, o Options, pool []audit.Record) {
	const batches, size = 200, 512
	for range b.N {
		b.StopTimer()
		down := o
		down.DSN = "clickhouse://127.0.0.1:1/default" // nothing listens: every batch stays spooled
		down.InsertTimeout = 200 * time.Millisecond
		s, err := Open(context.Background(), down)
		if err != nil {
			b.Fatal(err)
		}
		batch := make([]audit.Record, size)
		var n uint64
		for range batches {
			for i := range batch {
				batch[i] = fresh(pool[n%uint64(len(pool))], n)
				n++
			}
			if _, err := s.AppendCalls(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		batch = nil
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapInuse
		var peak atomic.Uint64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			var m runtime.MemStats
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				runtime.ReadMemStats(&m)
				if m.HeapInuse > peak.Load() {
					peak.Store(m.HeapInuse)
				}
			}
		})
		b.StartTimer()
		start := time.Now()
		s = openStore(b, o)
		waitReady(b, s, 5*time.Minute)
		el := time.Since(start)
		b.StopTimer()
		close(stop)
		wg.Wait()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		wantRows(b, o, "calls", "id", batches*size)
		b.ReportMetric(float64(batches*size)/el.Seconds(), "calls/s")
		b.ReportMetric(float64(peak.Load()-min(base, peak.Load()))/(1<<20), "peak_heap_MiB")
	}
}
