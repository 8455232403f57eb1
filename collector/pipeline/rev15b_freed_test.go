package pipeline_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_FreedSilentReadSettlesLiveWrite (review rev15b, freed15):
// thegram is freed with its calls straddling the floor (W1 and a read R
// of team/c.gram before it, W2 from it on), so the restart's replay
// replays W1 and R silently. Right after the restart a sender's backlog
// brings L, a write of team/c.gram dated 30 s before R (a call of this
// run, never judged before). L is judged pending, then R, judged after it
// in event time, shows L synced: L is durable. That state change is
// output of a call of this run (docs/detection.md: "what the calls from
// the floor on make goes out as before"; "Output of a call of the
// partition the replay judges, or of this run, goes on as before"), but
// it is made while R, a silent call, is judged (gate.silentNow: "made
// while one is judged"), so it reaches neither the sinks nor the store:
// L stays stored pending, though the engine holds it durable, and no run
// ever stores its end (the engine counts none pending). On main R is
// passed over and L, judged without it, ends unverified, announced and
// stored, as in an uninterrupted run (L came after the freeing): this
// passes on main and fails on freed15, a regression.
func TestRestart_FreedSilentReadSettlesLiveWrite(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock(wallStart)
			key := detect.PartitionKey{Server: "thegram"}
			r := openRun(t, dir, clock, nil, nil)
			other := laggingPoster(t, &r, clock)
			other()
			atR := wallStart.Add(-40*time.Minute + time.Minute)
			w1 := batch(t, "poster", pendingPatchLine("s1", 1, wallStart.Add(-40*time.Minute), "team/a.gram"),
				readSyncedLine("s3", 3, atR, "team/c.gram"))
			if _, err := r.ingest(w1); err != nil {
				t.Fatal(err)
			}
			r.steps(50, other)
			w2 := batch(t, "poster", pendingPatchLine("s2", 2, clock.Now().Add(-time.Second), "team/b.gram"))
			if _, err := r.ingest(w2); err != nil {
				t.Fatal(err)
			}
			var wm time.Time
			for deadline := time.Now().Add(20 * time.Second); wm.IsZero(); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the state file does not keep thegram freed")
				}
				r.steps(1, other)
				wm = freedIn(t, dir, key)
			}
			r.steps(2, other)
			wm, floor := freedIn(t, dir, key), floorIn(t, dir)
			if !atR.Before(floor) || w2.Records[0].Call.Time.Before(floor) || w2.Records[0].Call.Time.After(wm) {
				t.Fatalf("R %v, W2 %v, freed at %v, floor %v: want R before the floor, W2 from it on: the test shows nothing",
					atR, w2.Records[0].Call.Time, wm, floor)
			}
			stopOrCrash(r, crash)

			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
			late := batch(t, "slowposter", pendingPatchLine("s7", 77, atR.Add(-30*time.Second), "team/c.gram"))
			if _, err := r.ingest(late); err != nil {
				t.Fatal(err)
			}
			r.steps(30, other)
			idL := ids(late)[0]
			n, states := announcedWritesOf(r, idL)
			pendingNow := r.status()[key].Pending
			logs := r.logs.String()
			o := r.stop()
			t.Logf("thegram's pending writes in the engine at the end: %d", pendingNow)
			seeded := strings.Contains(logs, "freed_calls_seeded=2 ")
			t.Logf("seeded W1 and R: %v; L's write states announced: %d (%s); stored: %s", seeded, n, states, writeStateOf(o, idL))
			if s := writeStateOf(o, idL); s == string(audit.StatePending) {
				t.Errorf("L, a write of this run, is left stored pending: its end (settled by the silent read R) was dropped")
			}
			if pendingNow == 0 && writeStateOf(o, idL) == "none" {
				t.Errorf("L is not stored at all")
			}
		})
	}
}
