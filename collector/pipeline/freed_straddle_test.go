package pipeline_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestRestart_FreedPartitionStraddlesTheFloor: a freed partition whose
// calls lie on both sides of the state file's floor (another server's
// poster, its clock 90 minutes slow, holds the floor back), so the replay
// passes over some of them and judges the others again, whose windows
// then close on the wall clock with no call of this run (a sweep); a
// late write of the partition comes after the restart, dated before the
// freed watermark, early or once the replayed window has closed. Nothing
// of the calls passed over is announced again, nothing committed is lost,
// the late write's unverified_write is announced once and stored. The
// gate kept freed bounds of its own (taking such output as committed)
// until a probe on them found they took nothing, here (where they would
// have had to) nor in any other test: removed, this guards that. It fails
// if the replay judged the calls it passes over (W1 announced again).
func TestRestart_FreedPartitionStraddlesTheFloor(t *testing.T) {
	for _, c := range []struct {
		name  string
		crash bool // else a clean stop
		early bool // the late write comes before the replayed window closes
	}{
		{"stop/late_write_early", false, true},
		{"stop/late_write_after_sweep", false, false},
		{"crash/late_write_early", true, true},
		{"crash/late_write_after_sweep", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock(wallStart)
			r := openRun(t, dir, clock, nil, nil)
			other := laggingPoster(t, &r, clock)
			w1, w2, wm := straddleRun(t, r, clock, dir, other)
			before := stopOrCrash(r, c.crash)
			if len(before) != 2 {
				t.Fatalf("%d findings before the restart, want W1's and W2's unverified_write", len(before))
			}

			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
			late := lateWrite(t, wm.Add(-6*time.Minute))
			if c.early {
				if _, err := r.ingest(late); err != nil {
					t.Fatal(err)
				}
			}
			r.steps(30, other)
			if !c.early {
				if _, err := r.ingest(late); err != nil {
					t.Fatal(err)
				}
				r.steps(30, other)
			}
			r.rec.mu.Lock()
			writes := fmt.Sprint(r.rec.writes)
			w1again := 0
			for k, n := range r.rec.writes {
				if k[:len(ids(w1)[0])] == ids(w1)[0] {
					w1again += n
				}
			}
			r.rec.mu.Unlock()
			_, announced := r.rec.snapshot()
			logs := r.logs.String()
			o := r.stop()
			t.Logf("write states announced after the restart: %s", writes)
			if w1again > 0 {
				t.Errorf("W1 (before the floor: passed over) had %d write states announced again: %s", w1again, writes)
			}
			for id := range before {
				if announced[id] > 0 {
					t.Errorf("the finding %s, stored before the restart, was announced again", id)
				}
				if _, ok := o.findings[id]; !ok {
					t.Errorf("the finding %s, stored before the restart, is gone", id)
				}
			}
			lateID := ids(late)[0]
			n := 0
			for id, f := range o.findings {
				if f.Kind == audit.KindUnverifiedWrite && slices.Contains(f.Calls, lateID) {
					n++
					if announced[id] != 1 {
						t.Errorf("the late write's unverified_write was announced %d times, want once", announced[id])
					}
				}
			}
			if n != 1 || len(o.findings) != 3 {
				t.Errorf("%d findings stored (%d of the late write), want W1's, W2's and the late write's\n%s", len(o.findings), n, logs)
			}
			for _, w := range []audit.Batch{w1, w2} {
				if s := o.writes[ids(w)[0]+"/0"]; s != audit.StateUnverified {
					t.Errorf("the write %s is stored as %q after the restart, want unverified", ids(w)[0], s)
				}
			}
		})
	}
}
