package clickhouse

import (
	"context"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestAckLog_CloseDrainsSpool: with Ack "log" the drain waits BatchAge
// between rounds, here a minute. A batch acknowledged just before Close
// (serve's stop commits the detector's output last) was left in the spool
// by every stop, after "stopped cleanly" (live23's S1: 2 batches, 4,349
// bytes). Close drains it while ClickHouse answers: the spool is empty
// after it, and a store opened on another, empty spool reads every call.
func TestAckLog_CloseDrainsSpool(t *testing.T) {
	serverDSN(t)
	pool := benchPool(t, 256)
	appendPool := func(s *Store, base uint64) {
		t.Helper()
		batch := make([]audit.Record, len(pool))
		for i := range pool {
			batch[i] = fresh(pool[i], base+uint64(i))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := s.AppendCalls(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	count := func(s *Store) int {
		t.Helper()
		n := 0
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.ScanCalls(ctx, time.Time{}, func(*audit.Record) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	o := testOptions(t)
	o.Ack, o.BatchAge = AckLog, time.Minute
	s := openStore(t, o)
	appendPool(s, 0)
	// The read waits for the drain: its round is over, and the next comes
	// a minute later.
	if n := count(s); n != len(pool) {
		t.Fatalf("read back %d calls, want %d", n, len(pool))
	}
	appendPool(s, uint64(len(pool)))
	if n, _ := s.SpoolLeft(); n == 0 {
		t.Fatal("the second batch was drained before Close: the test shows nothing")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n, bytes := s.SpoolLeft(); n != 0 {
		t.Errorf("Close with ClickHouse up left %d batches (%d bytes) in the spool", n, bytes)
	}
	o.Spool.Dir = t.TempDir()
	if n := count(openStore(t, o)); n != 2*len(pool) {
		t.Errorf("ClickHouse holds %d calls after Close, want %d", n, 2*len(pool))
	}
}
