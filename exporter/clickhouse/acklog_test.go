package clickhouse

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestAckLog_NoFlushTimer: with Ack "log", AppendCalls returns once the
// batch is synced to the spool, not when a batch timer of a minute fires,
// and the calls are then read back (the query waits for the drain). With
// Ack "insert" the same append waits for the timer.
func TestAckLog_NoFlushTimer(t *testing.T) {
	serverDSN(t)
	pool := benchPool(t, 512)
	append512 := func(s *Store, base uint64) error {
		batch := make([]audit.Record, len(pool))
		for i := range pool {
			batch[i] = fresh(pool[i], base+uint64(i))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := s.AppendCalls(ctx, batch)
		return err
	}
	o := testOptions(t)
	o.Ack, o.BatchAge = AckLog, time.Minute
	s := openStore(t, o)
	for i := range 3 {
		if err := append512(s, uint64(i)*512); err != nil {
			t.Fatalf("append %d with Ack log and a one-minute batch age: %v", i, err)
		}
	}
	n := 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.ScanCalls(ctx, time.Time{}, func(*audit.Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 3*512 {
		t.Fatalf("read back %d calls, want %d", n, 3*512)
	}

	o = testOptions(t)
	o.Ack, o.BatchAge = AckInsert, time.Minute
	s = openStore(t, o)
	if err := append512(s, 0); err == nil {
		t.Fatal("with Ack insert a 512-call batch was acknowledged before the one-minute batch age: the test shows nothing")
	}
}

// BenchmarkSequential512 is one sequential client (an SDK exporter)
// appending batches of 512 calls and waiting for each acknowledgement,
// with the default batch age (1s), in both ack modes.
//
//	go test -run '^$' -bench Sequential512 -benchtime 200x ./exporter/clickhouse/
func BenchmarkSequential512(b *testing.B) {
	serverDSN(b)
	pool := benchPool(b, 20000)
	for _, ack := range []string{AckLog, AckInsert} {
		b.Run(ack, func(b *testing.B) {
			o := testOptions(b)
			o.Ack, o.BatchAge = ack, time.Second
			s := openStore(b, o)
			batch := make([]audit.Record, 512)
			lat := make([]time.Duration, 0, b.N)
			var n uint64
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				for i := range batch {
					batch[i] = fresh(pool[n%uint64(len(pool))], n)
					n++
				}
				t0 := time.Now()
				if _, err := s.AppendCalls(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			el := time.Since(start)
			b.StopTimer()
			// What the drain had not inserted yet when the last ack came:
			// a backlog that grows means the inserts behind do not keep up.
			left, bytes := s.spool.usage()
			b.ReportMetric(float64(left), "spooled_batches_left")
			b.ReportMetric(float64(bytes)/(1<<20), "spooled_MiB_left")
			if ack == AckLog {
				t0 := time.Now()
				if err := s.settle(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(time.Since(t0).Seconds(), "drain_tail_s")
			}
			slices.Sort(lat)
			b.ReportMetric(float64(n)/el.Seconds(), "calls/s")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ack_p50_ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ack_p99_ms")
		})
	}
}
