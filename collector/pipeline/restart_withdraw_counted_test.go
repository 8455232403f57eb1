package pipeline_test

import (
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestRestart_WithdrawalRefusedAtRestartThenCrash (review rev20w of wd20):
// the withdrawal is lost in a crash (the process dies at the commit after
// the late replay is judged); the restart makes it (counted, since wd20:
// docs/metrics.md) but the store refuses it (unavailable), the state file
// keeps it, and the restart dies too. The second restart makes it from
// the state file and does not count it, taking it as counted by the run
// before; that run never counted it. Over the three runs the withdrawal
// must be counted once, as it is when the first restart's store takes it.
func TestRestart_WithdrawalRefusedAtRestartThenCrash(t *testing.T) {
	s := newLateReplay(20 * time.Second)
	want := s.inOrder(t)
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRunDetect(t, dir, clock, nil, s.dedit, nil)
	open := s.closeWindow(t, r, clock)
	id := open[0]
	s.sendReplay(t, r, clock, &r.cs.dieAtCommit)
	r.die()

	total := 0
	rec := newRecorder()
	r = openRunStore(t, dir, clock, nil, s.dedit, rec, func(cs *crashStore) { cs.failChange.Store(true) })
	clock.Add(10 * time.Minute)
	if _, err := r.ingest(batch(t, "calls:reproA", s.tail)); err != nil {
		t.Fatal(err)
	}
	r.steps(20, nil)
	if f := findingByID(t, r, id); f.StateOf() == audit.FindingWithdrawn {
		t.Fatal("withdrawn while the store refuses: the test shows nothing")
	}
	rec.mu.Lock()
	total += rec.withdrawn[id]
	rec.mu.Unlock()
	r.crash()

	rec = newRecorder()
	r = openRunDetect(t, dir, clock, nil, s.dedit, rec)
	r.steps(4, nil)
	if f := findingByID(t, r, id); f.StateOf() != audit.FindingWithdrawn {
		t.Errorf("after the second restart the finding is %s, want withdrawn", f.StateOf())
	}
	rec.mu.Lock()
	total += rec.withdrawn[id]
	rec.mu.Unlock()
	if total != 1 {
		t.Errorf("the restarts told the sinks the withdrawal %d times, want once (the live run that lost it told it at most in its last commit interval)", total)
	}
	sameStored(t, "after the restarts", r.stop(), want)
}
