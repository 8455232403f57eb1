package pipeline_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_TooLateSettlerNotWithdrawn (review rev19w of wd19): a write
// stored pending (sync pending) is read synced by a call dated within its
// window that comes too late (more than allowed_lateness behind the
// partition's watermark): stored and counted, never judged. The write's
// window closes, its unverified_write is stored, and no run without a
// restart ever withdraws it. docs/detection.md ("Late calls") says that a
// finding "settled in the replay by a call the live run counted too late"
// stays as it is after a restart, on the ClickHouse store (which keeps no
// too-late names, so the replay judges the read) because "the live run
// committed after it, so the mark covers it".
//
// The store here keeps no too-late names (forgetTooLate, as ClickHouse),
// and the process stops cleanly (no crash: no withdrawal was ever made,
// none was lost). Two ways the mark does not cover the read:
//   - sliver: the read came between allowed_lateness and allowed_lateness
//   - lateness behind the watermark, and the watermark moved less than
//     lateness before the stop's commit: too late for the engine, not
//     covered by the gate (the mark less allowed_lateness + lateness).
//   - state_file_lost: the state file (partitions.json) is gone at the
//     restart, so no mark covers anything (docs/storage.md: the replay
//     judges every stored call again).
//
// In both, wd19's restart withdraws the finding with a note saying a
// withdrawal "was lost (the process stopped before its commit)" though
// none was ever made: the store after a clean restart differs from the
// same run without one.
//
// Fails on wd19 (bc92b23): sliver and state_file_lost, the finding
// withdrawn; passes on main (ad6a8cb). Fixed by review rev19w (D1): a
// restart withdraws only for a call its partition's mark less
// allowed_lateness does not cover, and never without a mark
// (gate.lostWithdrawal).
func TestRestart_TooLateSettlerNotWithdrawn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool
		lost    bool
	}{
		{name: "no_restart"},
		{name: "sliver", restart: true},
		{name: "state_file_lost", restart: true, lost: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock(wallStart)
			forget := func(cs *crashStore) { cs.forgetTooLate.Store(true) }
			r := openRunStore(t, dir, clock, nil, nil, nil, forget)
			tr := newTraffic(t, r)
			tr.ticks(20)
			tw := clock.Now().Add(-time.Second)
			write := batch(t, "pod-1", pendingPatchLine("s9", 900, tw, "team/x.gram"))
			if _, err := r.ingest(write); err != nil {
				t.Fatal(err)
			}
			wid := ids(write)[0]
			// Past the write's window (5 m): its unverified_write stored.
			tr.ticks(350)
			key := detect.PartitionKey{Server: "thegram"}
			st := r.status()[key]
			wm := st.Watermark
			al := detect.NewDefaultConfig().AllowedLateness
			at := wm.Add(-al - 500*time.Millisecond)
			if at.Before(tw) || at.After(tw.Add(detect.NewDefaultConfig().VerifyWindow)) {
				t.Fatalf("the read at %s is not within the write's window from %s", at, tw)
			}
			if _, err := r.ingest(batch(t, "pod-0", readSyncedLine("s9", 901, at, "team/x.gram"))); err != nil {
				t.Fatal(err)
			}
			after := r.status()[key]
			if after.TooLate != st.TooLate+1 {
				t.Fatalf("the read at %s is not too late (watermark %s, too late %d -> %d)", at, after.Watermark, st.TooLate, after.TooLate)
			}
			if d := after.Watermark.Sub(wm); d >= detect.NewDefaultConfig().Lateness {
				t.Fatalf("the watermark moved %s after the read: the sliver is gone", d)
			}
			fid := unverifiedOf(t, r, wid)
			if tc.restart {
				r.stop()
				if tc.lost {
					if err := os.Remove(filepath.Join(dir, "partitions.json")); err != nil {
						t.Fatal(err)
					}
				}
				clock.Add(time.Second)
				r = openRunStore(t, dir, clock, nil, nil, nil, forget)
				tr.r = r
			}
			tr.ticks(400)
			f := findingByID(t, r, fid)
			if f.StateOf() != audit.FindingOpen {
				t.Errorf("the unverified_write of %s, left open by the live run (its read came too late, never judged), is %s after the restart (by %q: %q)",
					wid, f.StateOf(), f.Status.By, f.Status.Note)
			}
			r.stop()
		})
	}
}

// unverifiedOf returns the id of the stored unverified_write of the write
// of call id.
func unverifiedOf(t *testing.T, r *run, id string) string {
	t.Helper()
	for fid, f := range r.read().findings {
		if f.Kind == audit.KindUnverifiedWrite && len(f.Calls) == 1 && f.Calls[0] == id {
			return fid
		}
	}
	t.Fatalf("no unverified_write of %s stored", id)
	return ""
}

// findingByID returns the stored finding id, whatever its state.
func findingByID(t *testing.T, r *run, id string) audit.Finding {
	t.Helper()
	pg, err := r.store.Findings(context.Background(), audit.FindingQuery{ID: id})
	if err != nil || len(pg.Findings) != 1 {
		t.Fatalf("finding %s by its id: %+v, %v", id, pg.Findings, err)
	}
	return pg.Findings[0]
}

// TestRestart_WithdrawalRetriedThenCrash (review rev19w of wd19): the late
// replay settles the write whose window closed and is judged, its commit
// goes through (the write stored resolved), but the store cannot take the
// withdrawal (ChangeFinding fails, audit.ErrUnavailable): the pipeline
// keeps it for the next commit (docs: "what the store cannot take now is
// tried again at the next commit"), and the process dies.
//
//   - crash_at_once: the marks saved by that commit do not cover the
//     replay's call; the restart withdraws the finding.
//   - crash_after_later_commits (D2): commits of later output go through,
//     each saving marks, and the marks pass the replay's call by the
//     lateness bounds before the store takes the withdrawal. The restart
//     judges the replay as committed: on wd19 (bc92b23) and main
//     (2cf684b) it withdrew nothing, and the unverified_write stayed open
//     for good. Fixed by wd20: the state file keeps the withdrawals the
//     store refused (markFile.Withdrawals), and the restart makes them.
//   - crash_after_later_commits_twice: the restart dies too before the
//     store takes the withdrawal (still unavailable); the second restart
//     makes it.
//
// Each on the embedded store and on the ClickHouse store's path as the
// harness has it (the real SQLite store that keeps no calls too late and
// tells nothing of the calls it held, as ClickHouse: a stand-in, not the
// ClickHouse server).
func TestRestart_WithdrawalRetriedThenCrash(t *testing.T) {
	for _, store := range []struct {
		name  string
		fault func(*crashStore)
	}{
		{"embedded", nil},
		{"clickhouse_path", func(cs *crashStore) { cs.forgetTooLate.Store(true); cs.tells = tellsNothing }},
	} {
		for _, tc := range []struct {
			name  string
			later bool
			twice bool
		}{
			{"crash_at_once", false, false},
			{"crash_after_later_commits", true, false},
			{"crash_after_later_commits_twice", true, true},
		} {
			t.Run(store.name+"/"+tc.name, func(t *testing.T) {
				s := newLateReplay(20 * time.Second)
				want := s.inOrder(t)
				if len(openFindings(want)) != 0 {
					t.Fatalf("judged in time order: findings %v, want none", openFindings(want))
				}
				dir := t.TempDir()
				clock := newClock(wallStart)
				rec := newRecorder()
				r := openRunStore(t, dir, clock, nil, s.dedit, rec, store.fault)
				open := s.closeWindow(t, r, clock)
				id := open[0]
				s.sendReplay(t, r, clock, &r.cs.failChange) // the replay judged, the write's state committed, the withdrawal refused
				if tc.later {
					clock.Add(10 * time.Minute)
					if _, err := r.ingest(batch(t, "calls:reproA", s.tail)); err != nil {
						t.Fatal(err)
					}
					r.steps(20, nil) // later commits go through, marks saved past the replay
				}
				if f := findingByID(t, r, id); f.StateOf() == audit.FindingWithdrawn {
					t.Fatalf("the finding is withdrawn before the crash: the test shows nothing")
				}
				rec.mu.Lock()
				told := rec.withdrawn[id]
				rec.mu.Unlock()
				if told != 1 {
					t.Errorf("the live run told the sinks the withdrawal %d times, want once", told)
				}
				r.crash()

				if tc.twice {
					r = openRunStore(t, dir, clock, nil, s.dedit, nil, func(cs *crashStore) {
						if store.fault != nil {
							store.fault(cs)
						}
						cs.failChange.Store(true)
					})
					r.steps(4, nil)
					if f := findingByID(t, r, id); f.StateOf() == audit.FindingWithdrawn {
						t.Fatalf("the finding is withdrawn while the store refuses: the test shows nothing")
					}
					r.crash()
				}

				rec = newRecorder()
				r = openRunStore(t, dir, clock, nil, s.dedit, rec, store.fault)
				if !tc.later {
					clock.Add(10 * time.Minute)
					if _, err := r.ingest(batch(t, "calls:reproA", s.tail)); err != nil {
						t.Fatal(err)
					}
				}
				r.steps(20, nil)
				if f := findingByID(t, r, id); f.StateOf() != audit.FindingWithdrawn {
					t.Errorf("after the restart the unverified_write %s is %s: its withdrawal, kept for a retry, was lost in the crash and the restart does not make it (judged in time order there is no such finding)", id, f.StateOf())
				}
				// The live run counted the withdrawal when it judged the
				// replay, and the state file, written when the store
				// refused it, says so: the restart does not count it again
				// (docs/metrics.md).
				rec.mu.Lock()
				told = rec.withdrawn[id]
				rec.mu.Unlock()
				if told != 0 {
					t.Errorf("the restart told the sinks the withdrawal %d times, want none: the live run counted it", told)
				}
				sameStored(t, "after the restart", r.stop(), want)
			})
		}
	}
}

// TestRestart_JoiningRetryNotWithdrawn (review rev19w of wd19, holds): the
// late call is a same-key retry that is itself uncertain (canceled): it
// joins the write (one logical write, one unverified_write), settles
// nothing, and the live run withdraws nothing. The process dies at the
// commit after the retry is judged; the restart must leave the stored
// unverified_write open, as the calls stored judged in time order make it.
func TestRestart_JoiningRetryNotWithdrawn(t *testing.T) {
	s := newLateReplay(20 * time.Second)
	s.replay = keyedPatchLine("s-b", 2, wallStart.Add(-s.vw-40*time.Second).Add(s.vw-5*time.Second), false)
	want := s.inOrder(t)
	if len(openFindings(want)) != 1 {
		t.Fatalf("judged in time order: findings %v, want the write's unverified_write", openFindings(want))
	}
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRunDetect(t, dir, clock, nil, s.dedit, nil)
	open := s.closeWindow(t, r, clock)
	if !slices.Equal(open, openFindings(want)) {
		t.Fatalf("findings before the retry came %v, want %v", open, openFindings(want))
	}
	s.sendReplay(t, r, clock, &r.cs.dieAtCommit)
	r.cs.mu.RLock()
	crashed := r.cs.crashed
	r.cs.mu.RUnlock()
	if !crashed {
		t.Fatal("no commit after the retry: the test shows nothing")
	}
	r.die()

	r = openRunDetect(t, dir, clock, nil, s.dedit, nil)
	clock.Add(10 * time.Minute)
	if _, err := r.ingest(batch(t, "calls:reproA", s.tail)); err != nil {
		t.Fatal(err)
	}
	r.steps(20, nil)
	if f := findingByID(t, r, open[0]); f.StateOf() != audit.FindingOpen {
		t.Errorf("the unverified_write %s, which a joining retry leaves standing, is %s after the restart (%+v)", open[0], f.StateOf(), f.Status)
	}
	sameStored(t, "after the restart", r.stop(), want)
}

// TestRestart_WithdrawLostTwice (review rev19w of wd19): the withdrawal
// is lost in a crash, and the restart that would make it dies too, at its
// first commit of output (the replay's settled write), before the
// withdrawal. A second restart must still withdraw the stored
// unverified_write: judged in time order there is none.
func TestRestart_WithdrawLostTwice(t *testing.T) {
	s := newLateReplay(20 * time.Second)
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRunDetect(t, dir, clock, nil, s.dedit, nil)
	open := s.closeWindow(t, r, clock)
	id := open[0]
	s.sendReplay(t, r, clock, &r.cs.dieAtCommit)
	r.die()

	clock.Add(time.Second)
	r = openRunStore(t, dir, clock, nil, s.dedit, nil, func(cs *crashStore) { cs.dieAtCommit.Store(true) })
	r.status()
	r.cs.mu.RLock()
	crashed := r.cs.crashed
	r.cs.mu.RUnlock()
	if !crashed {
		t.Fatal("the first restart made no commit of output: the test shows nothing")
	}
	if f := findingByID(t, r, id); f.StateOf() == audit.FindingWithdrawn {
		t.Fatal("the first restart withdrew the finding before its commit: the test shows nothing")
	}
	r.die()

	clock.Add(time.Second)
	r = openRunDetect(t, dir, clock, nil, s.dedit, nil)
	clock.Add(10 * time.Minute)
	if _, err := r.ingest(batch(t, "calls:reproA", s.tail)); err != nil {
		t.Fatal(err)
	}
	r.steps(20, nil)
	if f := findingByID(t, r, id); f.StateOf() != audit.FindingWithdrawn {
		t.Errorf("after two crashes the unverified_write %s is %s, want withdrawn", id, f.StateOf())
	}
	r.stop()
}
