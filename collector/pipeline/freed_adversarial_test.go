package pipeline_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// laggingPoster returns a poster of another server whose clock runs 90
// minutes slow: each call it sends holds the state file's floor back. It
// sends to *r, so that it follows the test's run across restarts.
func laggingPoster(t *testing.T, r **run, clock *testClock) func() {
	rpc := 1000
	return func() {
		t.Helper()
		rpc++
		if _, err := (*r).ingest(batch(t, "lagging", callLine("other", "o1", rpc, clock.Now().Add(-90*time.Minute)))); err != nil {
			t.Fatal(err)
		}
	}
}

// stopOrCrash ends r cleanly, or kills it when crash is set, and returns
// the ids of the findings stored.
func stopOrCrash(r *run, crash bool) map[string]bool {
	if crash {
		return r.crash()
	}
	ids := map[string]bool{}
	for id := range r.stop().findings {
		ids[id] = true
	}
	return ids
}

// writeStateOf returns the stored state of the write of call id (seq 0),
// "none" when the store holds none.
func writeStateOf(o outcome, id string) string {
	if s, ok := o.writes[id+"/0"]; ok {
		return string(s)
	}
	return "none"
}

// announcedWritesOf counts the write states announced for call id.
func announcedWritesOf(r *run, id string) (int, string) {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	n := 0
	var states []string
	for k, c := range r.rec.writes {
		if strings.HasPrefix(k, id+"/") {
			n += c
			states = append(states, fmt.Sprintf("%s×%d", k, c))
		}
	}
	return n, strings.Join(states, " ")
}

// TestRestart_FreedDoubleApplyStraddlesTheFloor: a double application
// whose first attempt A is before the state file's floor and whose second
// B is from it on, both before the watermark the partition was freed at
// (a neighbour's poster, its clock 90 minutes slow, holds the floor back).
// The replay passes over A and judges B. B's stored double_applied state
// must not be rewritten, no finding stored before the restart is announced
// again, and no finding appears that no uninterrupted run would have made
// (B's unverified_write). Found by review rev14a: B, judged alone, was
// announced pending then unverified, stored over its double_applied row,
// and a new unverified_write of B was stored. With the bound on the calls
// the replay holds for this at 0 (bounded), A is passed over as before:
// B is judged alone again, and nothing stored before is announced again.
func TestRestart_FreedDoubleApplyStraddlesTheFloor(t *testing.T) {
	for _, c := range []struct{ crash, bounded bool }{{false, false}, {true, false}, {false, true}} {
		crash := c.crash
		t.Run(fmt.Sprintf("crash=%v/bounded=%v", c.crash, c.bounded), func(t *testing.T) {
			if c.bounded {
				defer pipeline.SetMaxSeedCalls(0)()
			}
			dir := t.TempDir()
			clock := newClock(wallStart)
			key := detect.PartitionKey{Server: "thegram"}
			r := openRun(t, dir, clock, nil, nil)
			other := laggingPoster(t, &r, clock)
			other()
			a := batch(t, "poster", pendingPatchLine("s1", 1, wallStart.Add(-20*time.Minute), "team/x.gram"))
			b := ingestThenLater(t, r, a, other, "team/x.gram")
			wm, floor := awaitFreedSettled(t, r, key, other)
			atA, atB := a.Records[0].Call.Time, b.Records[0].Call.Time
			t.Logf("A %v, B %v, freed at %v, floor %v", atA, atB, wm, floor)
			if wm.IsZero() || floor.IsZero() || !atA.Before(floor) || atB.Before(floor) || atB.After(wm) {
				t.Fatal("want A before the floor and B from it on, both up to the freed watermark: the test shows nothing")
			}
			idB := ids(b)[0]
			var before map[string]bool
			if crash {
				before = r.crash()
			} else {
				before = map[string]bool{}
				o := r.stop()
				for id := range o.findings {
					before[id] = true
				}
				if s := writeStateOf(o, idB); s != string(audit.StateDoubleApplied) {
					t.Fatalf("before the restart B is stored as %s, want double_applied", s)
				}
			}
			t.Logf("%d findings before the restart", len(before))

			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
			r.steps(30, other)
			nA, statesA := announcedWritesOf(r, ids(a)[0])
			nB, states := announcedWritesOf(r, idB)
			calls, announced := r.rec.snapshot()
			logs := r.logs.String()
			o := r.stop()
			if calls[ids(a)[0]] > 0 {
				t.Errorf("A's call (before the floor: replayed silently) was told to the sinks again")
			}
			t.Logf("B's write states announced after the restart: %d (%s)", nB, states)
			if nA > 0 {
				t.Errorf("A (before the floor: replayed silently) had write states announced again: %s", statesA)
			}
			for id := range before {
				if announced[id] > 0 {
					t.Errorf("the finding %s, stored before the restart, was announced again", id)
				}
				if _, ok := o.findings[id]; !ok {
					t.Errorf("the finding %s, stored before the restart, is gone", id)
				}
			}
			if c.bounded {
				if !strings.Contains(logs, " freed_calls_skipped=1 freed_calls_seeded=0 ") {
					t.Errorf("past the bound the replay did not pass over A:\n%s", logs)
				}
				return
			}
			if !strings.Contains(logs, " freed_calls_skipped=0 freed_calls_seeded=1 ") {
				t.Errorf("the replay did not replay A alone silently:\n%s", logs)
			}
			if s := writeStateOf(o, idB); s != string(audit.StateDoubleApplied) {
				t.Errorf("after the restart B is stored as %s, want double_applied (rewritten)", s)
			}
			for id, f := range o.findings {
				if !before[id] {
					t.Errorf("a finding no run made before the restart is stored after it: %s %v %v\n%s", f.Kind, f.Calls, f.Time, logs)
				}
			}
		})
	}
}

// straddleRun has thegram take W1, then W2 90-odd minutes' worth of steps
// later while a neighbour's poster, its clock 90 minutes slow, keeps
// sending (other), until thegram is freed with W1 before the state
// file's floor and W2 from it on, both up to the freed watermark.
func straddleRun(t *testing.T, r *run, clock *testClock, dir string, other func()) (w1, w2 audit.Batch, wm time.Time) {
	t.Helper()
	key := detect.PartitionKey{Server: "thegram"}
	other()
	w1 = batch(t, "poster", pendingPatchLine("s1", 1, wallStart.Add(-40*time.Minute), "team/a.gram"))
	w2 = ingestThenLater(t, r, w1, other, "team/b.gram")
	wm, floor := awaitFreedSettled(t, r, key, other)
	at1, at2 := w1.Records[0].Call.Time, w2.Records[0].Call.Time
	if wm.IsZero() || floor.IsZero() || !at1.Before(floor) || at2.Before(floor) || at2.After(wm) {
		t.Fatalf("W1 %v, W2 %v, freed at %v, floor %v: want W1 before the floor and W2 from it on, both up to the freed watermark: the test shows nothing", at1, at2, wm, floor)
	}
	return w1, w2, wm
}

// TestRestart_FreedByAReplayMadeRun: a restart of a restart. The first
// run frees thegram with its calls straddling the floor; the second
// replays the calls from the floor on (W2), so makes the partition, and
// frees it again: the freed entry it writes comes from a run whose
// partition the replay made. A third run, on that file, announces no
// finding stored before again, stores no new one, leaves W1's and W2's
// states as they were, and announces and stores a late write of thegram
// (dated before both freed watermarks) once.
func TestRestart_FreedByAReplayMadeRun(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock(wallStart)
			key := detect.PartitionKey{Server: "thegram"}
			r := openRun(t, dir, clock, nil, nil)
			other := laggingPoster(t, &r, clock)
			w1, w2, wm1 := straddleRun(t, r, clock, dir, other)
			before := map[string]bool{}
			for id := range r.stop().findings {
				before[id] = true
			}
			if len(before) != 2 {
				t.Fatalf("%d findings after the first run, want W1's and W2's unverified_write", len(before))
			}

			// The second run: the replay judges W2 (from the floor on),
			// makes thegram, which is freed again.
			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
			r.steps(30, other)
			freeIdle(t, r, key)
			awaitFreed(t, r, key, other)
			r.steps(2, other)
			t.Logf("freed at %v by the first run, at %v by the second (floor %v)", wm1, freedIn(t, dir, key), floorIn(t, dir))
			if crash {
				r.crash()
			} else {
				r.stop()
			}

			// The third run.
			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
			late := batch(t, "slowposter", pendingPatchLine("s9", 91, wm1.Add(-6*time.Minute), "team/y.gram"))
			if _, err := r.ingest(late); err != nil {
				t.Fatal(err)
			}
			r.steps(30, other)
			n1, s1 := announcedWritesOf(r, ids(w1)[0])
			n2, s2 := announcedWritesOf(r, ids(w2)[0])
			_, announced := r.rec.snapshot()
			logs := r.logs.String()
			o := r.stop()
			if n1+n2 > 0 {
				t.Errorf("the third run announced write states of W1 (%s) or W2 (%s), committed before", s1, s2)
			}
			for id := range before {
				if announced[id] > 0 {
					t.Errorf("the finding %s, stored before the restarts, was announced again", id)
				}
			}
			lateID := ids(late)[0]
			for id, f := range o.findings {
				if before[id] {
					continue
				}
				if f.Kind == audit.KindUnverifiedWrite && len(f.Calls) == 1 && f.Calls[0] == lateID {
					if announced[id] != 1 {
						t.Errorf("the late write's unverified_write was announced %d times, want once", announced[id])
					}
					continue
				}
				t.Errorf("a finding no run should have made: %s %v %v\n%s", f.Kind, f.Calls, f.Time, logs)
			}
			if len(o.findings) != 3 {
				t.Errorf("%d findings stored, want W1's, W2's and the late write's", len(o.findings))
			}
			for _, w := range []audit.Batch{w1, w2} {
				if s := writeStateOf(o, ids(w)[0]); s != string(audit.StateUnverified) {
					t.Errorf("the write %s is stored as %s, want unverified", ids(w)[0], s)
				}
			}
		})
	}
}

// ingestThenLater ingests first, steps r 50 times (other sending at each
// step), and ingests and returns a pending write of thegram to path dated
// a second before the clock then.
func ingestThenLater(t *testing.T, r *run, first audit.Batch, other func(), path string) audit.Batch {
	t.Helper()
	if _, err := r.ingest(first); err != nil {
		t.Fatal(err)
	}
	r.steps(50, other)
	later := batch(t, "poster", pendingPatchLine("s2", 2, r.clock.Now().Add(-time.Second), path))
	if _, err := r.ingest(later); err != nil {
		t.Fatal(err)
	}
	return later
}

// awaitFreed steps r (sending with send at each step) until its state
// file keeps k freed, for at most 400 steps of 30 s, and returns the
// watermark k was freed at.
func awaitFreed(t *testing.T, r *run, k detect.PartitionKey, send func()) time.Time {
	t.Helper()
	var wm time.Time
	if !r.stepsUntil(400, send, func() bool { wm = freedIn(t, r.dir, k); return !wm.IsZero() }) {
		t.Fatalf("the state file does not keep %v freed after 400 steps (clock %s)", k, r.clock.Now())
	}
	return wm
}

// awaitFreedSettled is awaitFreed and two steps more; it returns the
// watermark k was freed at and the floor the state file has then.
func awaitFreedSettled(t *testing.T, r *run, k detect.PartitionKey, send func()) (wm, floor time.Time) {
	t.Helper()
	awaitFreed(t, r, k, send)
	r.steps(2, send)
	return freedIn(t, r.dir, k), floorIn(t, r.dir)
}

// inTenant returns b with its calls in tenant.
func inTenant(b audit.Batch, tenant string) audit.Batch {
	for _, rec := range b.Records {
		rec.Call.Tenant = tenant
	}
	return b
}

// TestRestart_FreedPartitionOfOneTenant: two tenants run the same server
// name. Tenant a's thegram is freed; tenant b's keeps sending, its poster's
// clock far behind, so b's calls are dated before a's freed watermark
// (times a's entry covers) and b's write's window closes on the wall
// clock. After a crash or a stop, b's output is b's own: its write's
// unverified_write is stored and announced once in all, and nothing of a
// is announced again.
func TestRestart_FreedPartitionOfOneTenant(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock(wallStart)
			ka := detect.PartitionKey{Tenant: "a", Server: "thegram"}
			r := openRun(t, dir, clock, nil, nil)
			if _, err := r.ingest(inTenant(batch(t, "poster", pendingPatchLine("s0", 1, wallStart.Add(-time.Minute), "team/x.gram")), "a")); err != nil {
				t.Fatal(err)
			}
			rpc := 100
			bsend := func() {
				t.Helper()
				rpc++
				if _, err := r.ingest(inTenant(batch(t, "lagging", callLine("thegram", "o1", rpc, clock.Now().Add(-20*time.Minute))), "b")); err != nil {
					t.Fatal(err)
				}
			}
			r.steps(40, bsend)
			wm := awaitFreed(t, r, ka, bsend)
			// b's write, dated before a's freed watermark.
			wb := inTenant(batch(t, "lagging", pendingPatchLine("s5", 55, clock.Now().Add(-20*time.Minute), "team/z.gram")), "b")
			if !wb.Records[0].Call.Time.Before(wm) {
				t.Fatalf("b's write at %v is not before a's freed watermark %v: the test shows nothing", wb.Records[0].Call.Time, wm)
			}
			if _, err := r.ingest(wb); err != nil {
				t.Fatal(err)
			}
			r.steps(4, bsend) // b's window still open at the stop
			_, announced1 := r.rec.snapshot()
			if crash {
				r.crash()
			} else {
				r.stop()
			}
			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
			r.steps(40, bsend)
			_, announced2 := r.rec.snapshot()
			o := r.stop()
			idB := ids(wb)[0]
			n := 0
			for id, f := range o.findings {
				if f.Tenant == "a" && announced2[id] > 0 {
					t.Errorf("a's finding %s announced again after the restart", id)
				}
				if f.Tenant == "b" && f.Kind == audit.KindUnverifiedWrite && len(f.Calls) == 1 && f.Calls[0] == idB {
					n++
					if got := announced1[id] + announced2[id]; got != 1 {
						t.Errorf("b's unverified_write was announced %d times in all, want once", got)
					}
				}
			}
			if n != 1 {
				t.Errorf("%d unverified_write of b's write stored, want 1 (findings: %d)", n, len(o.findings))
			}
			if s := writeStateOf(o, idB); s != string(audit.StateUnverified) {
				t.Errorf("b's write is stored as %s, want unverified", s)
			}
		})
	}
}

// TestRestart_FreedPartitionCallSentAgain: a sender re-sends, after a
// restart, a write of a partition freed before it (its acknowledgement
// lost), dated before the freed watermark. The store holds it already:
// the write's state and finding, stored before, are neither stored as
// something else nor announced again.
//
// It failed on main (5dcc123) up to 1447de1, every run for the write
// states (pending then unverified, counted again), in most runs for the
// finding: the call began the partition anew and was judged as new (the
// store kept one finding and the state; whether the finding was announced
// again was a race with the gate's forget, which drops the ids of the
// stored findings at the engine goroutine's first pass when nothing of the
// partition was replayed). Review rev14a. Now the store says which calls
// it held, and which of those may complete the stored one
// (audit.AnswerReporter): a held call the freed entry covers is not judged
// again (Pipeline.resent). Variants: freed_resent_test.go.
func TestRestart_FreedPartitionCallSentAgain(t *testing.T) {
	sentAgain(t, resendCase{})
}

// TestRestart_FreedPartitionAckLog: TestRestart_FreedPartitionStraddlesTheFloor's
// case (W1 before the floor, passed over; W2 from it on, judged again; a
// late write after the restart) over a store that acknowledges calls once
// they are in its call log (ack: log), drained into SQLite behind the
// acknowledgements and applied again at the start: the replay reads the
// calls only once the log is applied. Nothing stored before is announced
// again, W1 has no write state announced again, the late write's
// unverified_write is announced once and stored.
func TestRestart_FreedPartitionAckLog(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock(wallStart)
			opts := sqlite.Options{Synchronous: "normal", Ack: sqlite.AckLog}
			r := openRunWith(t, dir, clock, nil, nil, nil, nil, opts)
			other := laggingPoster(t, &r, clock)
			w1, _, wm := straddleRun(t, r, clock, dir, other)
			before := stopOrCrash(r, crash)
			if len(before) != 2 {
				t.Fatalf("%d findings before the restart, want W1's and W2's unverified_write", len(before))
			}
			clock.Add(time.Second)
			r = openRunWith(t, dir, clock, nil, nil, nil, nil, opts)
			late := batch(t, "slowposter", pendingPatchLine("s9", 91, wm.Add(-6*time.Minute), "team/y.gram"))
			if _, err := r.ingest(late); err != nil {
				t.Fatal(err)
			}
			r.steps(30, other)
			n1, s1 := announcedWritesOf(r, ids(w1)[0])
			_, announced := r.rec.snapshot()
			o := r.stop()
			if n1 > 0 {
				t.Errorf("W1 (passed over) had write states announced again: %s", s1)
			}
			for id := range before {
				if announced[id] > 0 {
					t.Errorf("the finding %s, stored before the restart, was announced again", id)
				}
			}
			lateID := ids(late)[0]
			n := 0
			for id, f := range o.findings {
				if f.Kind == audit.KindUnverifiedWrite && len(f.Calls) == 1 && f.Calls[0] == lateID {
					n++
					if announced[id] != 1 {
						t.Errorf("the late write's unverified_write was announced %d times, want once", announced[id])
					}
				}
			}
			if n != 1 || len(o.findings) != 3 {
				t.Errorf("%d findings stored (%d of the late write), want W1's, W2's and the late write's", len(o.findings), n)
			}
		})
	}
}
