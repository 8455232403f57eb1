package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestAckLog_RetentionWhileDrainFails: with ack log, retention waits for
// the calls acknowledged before it to be committed, but not while the
// drain fails (a full disk): retention is what frees pages for it. Every
// pass failed after LogWait with the drain failing (found by review);
// it now deletes what is committed, at once.
func TestAckLog_RetentionWhileDrainFails(t *testing.T) {
	recs := records(t, 40)
	s := openTemp(t, Options{Ack: AckLog, LogWait: 2 * time.Second})
	defer s.Close()
	if _, err := s.AppendCalls(t.Context(), recs[:20]); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s); n != 20 {
		t.Fatalf("%d stored", n)
	}
	s.clog.gate.Lock()
	s.clog.refuse = func([]callRow) error {
		return fmt.Errorf("%w: database or disk is full (simulated)", audit.ErrUnavailable)
	}
	s.clog.gate.Unlock()
	if _, err := s.AppendCalls(t.Context(), recs[20:30]); err != nil {
		t.Fatal(err)
	}
	// Once the drain has failed, a pass does not wait for it.
	for end := time.Now().Add(5 * time.Second); ; {
		if _, failed := s.clog.nextProgress(); failed != nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the drain did not fail")
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	n, err := s.DeleteBefore(context.Background(), time.Now().Add(100*365*24*time.Hour))
	if err != nil || n < 20 {
		t.Errorf("DeleteBefore while the drain fails: %d rows, %v; want the 20 committed calls and their rows deleted", n, err)
	}
	if d := time.Since(start); d >= s.opts.LogWait {
		t.Errorf("DeleteBefore took %v, LogWait %v: it waited for a drain that fails", d, s.opts.LogWait)
	}
	s.clog.gate.Lock()
	s.clog.refuse = nil
	s.clog.gate.Unlock()
}
