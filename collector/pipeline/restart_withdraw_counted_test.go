package pipeline_test

import (
	"strings"
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

// TestRestart_WithdrawalCountedTwiceWhileCommitsFail (review rev20w of
// wd20, R3): the late replay is judged while the store refuses commits
// (Commit unavailable, a ClickHouse down for minutes). The withdrawal
// waits behind the failing commit and never reaches the state file
// (withdraw runs after a commit that went through). Until wd21 the live
// run told the sinks the withdrawal at once (counted, and scraped for as
// long as commits fail); the process died, and the restart made the
// withdrawal from its replay and counted it again (wd20): the finding
// counted once, its withdrawal twice. Since wd21 a withdrawal of a stored
// finding is counted at the first attempt to store it (the store takes
// it, or refuses it as unavailable and the state file keeps it), so the
// live run counts nothing while commits fail, and the count over the runs
// is one whether the process dies before or after commits come back.
func TestRestart_WithdrawalCountedTwiceWhileCommitsFail(t *testing.T) {
	for _, back := range []bool{false, true} {
		name := "crash_while_commits_fail"
		if back {
			name = "commits_back_then_crash"
		}
		t.Run(name, func(t *testing.T) {
			s := newLateReplay(20 * time.Second)
			want := s.inOrder(t)
			dir := t.TempDir()
			clock := newClock(wallStart)
			rec := newRecorder()
			r := openRunDetect(t, dir, clock, nil, s.dedit, rec)
			open := s.closeWindow(t, r, clock)
			id := open[0]
			s.sendReplay(t, r, clock, &r.cs.failCommit)
			r.steps(4, nil) // minutes of failing commits: the counter scraped
			rec.mu.Lock()
			told, settled := rec.withdrawn[id], 0
			for k, n := range rec.writes {
				if strings.HasSuffix(k, "/resolved") {
					settled += n
				}
			}
			found := rec.findings[id]
			rec.mu.Unlock()
			if found != 1 {
				t.Fatalf("the live run told the finding %d times, want once: the test shows nothing", found)
			}
			if settled != 0 {
				t.Errorf("the live run told the write's move to resolved %d times while no commit went through, want 0 (told once the commit storing it goes through)", settled)
			}
			if told != 0 {
				t.Errorf("the live run told the withdrawal %d times while no commit went through, want 0 (counted at the first attempt to store it)", told)
			}
			if back {
				r.cs.failCommit.Store(false)
				r.steps(4, nil)
				rec.mu.Lock()
				told, settled = rec.withdrawn[id], 0
				for k, n := range rec.writes {
					if strings.HasSuffix(k, "/resolved") {
						settled += n
					}
				}
				rec.mu.Unlock()
				if told != 1 || settled != 1 {
					t.Errorf("the live run told the withdrawal %d times and the move to resolved %d times once commits went through, want once each (the late call judged live)", told, settled)
				}
			}
			r.crash()

			rec = newRecorder()
			r = openRunDetect(t, dir, clock, nil, s.dedit, rec)
			clock.Add(10 * time.Minute)
			if _, err := r.ingest(batch(t, "calls:reproA", s.tail)); err != nil {
				t.Fatal(err)
			}
			r.steps(20, nil)
			if f := findingByID(t, r, id); f.StateOf() != audit.FindingWithdrawn {
				t.Errorf("after the restart the finding is %s, want withdrawn", f.StateOf())
			}
			rec.mu.Lock()
			told += rec.withdrawn[id]
			rec.mu.Unlock()
			if told != 1 {
				t.Errorf("the withdrawal was told the sinks %d times over the two runs, the finding once: want once", told)
			}
			sameStored(t, "after the restart", r.stop(), want)
		})
	}
}
