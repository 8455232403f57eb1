package pipeline_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_TooLateReadLeavesWritePending: found from outside (adv14,
// 8 OTLP/gRPC clients under serve.memory_limit 192MiB, 246e0cb): pod-1's
// write is judged pending (sync not confirmed), then pod-1 is held back
// (refused) past allowed_lateness, so the read that shows the write synced
// comes too late: stored, not judged. Without a restart the write becomes
// unverified when its window ends. With a restart before that, the replay
// judges the read (the store holds it), the engine takes the write as
// durable at the read's time, and the gate drops that state as committed
// before the restart (the read is older than the mark less the lateness
// bounds), though it never was: the store keeps the write pending for
// good, and its window never closes. In the outside run, 375 writes stayed
// pending hours past their windows.
//
// Only a write the store holds pending is stored again
// (TestRestart_SettledLiveNotCountedAgain); a store that cannot tell which
// has every such write stored again.
//
// The store now keeps which calls came too late, and the replay passes
// over them (TestRestart_TooLateCallsNotJudgedByReplay): the cases below
// but the "kept" ones run over a store that keeps none (forgetTooLate), as
// the ClickHouse store is, and as a store migrated from schema 5 is for
// the calls stored too late before the upgrade, or one whose process died
// between counting a call too late and the next commit: there the replay
// still judges the read, and the guards above still hold.
func TestRestart_TooLateReadLeavesWritePending(t *testing.T) {
	for _, tc := range []struct {
		name                string
		restart, cannotTell bool
		// kept has the store keep the calls too late: the replay passes
		// over the read, asks nothing, and the write's window closes.
		kept bool
		log  string
		// windowClosed runs past the write's window before the stop, not
		// past the replay's reach: the live run stored it unverified, and
		// the replay's settling of it by the too-late read must neither
		// overwrite that nor be told again. Two guards keep it: the window
		// ended before the mark less the lateness bounds, and the store
		// does not hold it pending; the case fails with both removed.
		windowClosed bool
	}{
		{name: "no_restart"},
		{name: "restart", restart: true, log: "read the writes stored pending that replayed calls may settle"},
		{name: "restart_store_cannot_tell", restart: true, cannotTell: true, log: "cannot read the writes stored pending"},
		{name: "restart_after_window_closed", restart: true, windowClosed: true},
		{name: "restart_kept", restart: true, kept: true, log: "too_late_calls_skipped=1"},
		{name: "restart_after_window_closed_kept", restart: true, windowClosed: true, kept: true},
	} {
		restart := tc.restart
		t.Run(tc.name, func(t *testing.T) {
			onlyOnceUnderRace(t, tc.name == "restart")
			dir := t.TempDir()
			clock := newClock(wallStart)
			forget := func(cs *crashStore) { cs.forgetTooLate.Store(!tc.kept) }
			r := openRunStore(t, dir, clock, nil, nil, nil, forget)
			tr := newTraffic(t, r)
			tr.ticks(20)
			tw := clock.Now().Add(-time.Second)
			write := batch(t, "pod-1", pendingPatchLine("s9", 900, tw, "team/x.gram"))
			if _, err := r.ingest(write); err != nil {
				t.Fatal(err)
			}
			wid := ids(write)[0]
			tr.tick()
			// pod-1's read of the document, synced, is held back with it
			// (refused) for 150 s: once delivered it is too late.
			read := readSyncedLine("s9", 901, clock.Now().Add(-time.Second), "team/x.gram")
			tr.ticks(150, "pod-1")
			if _, err := r.ingest(batch(t, "pod-1", read)); err != nil {
				t.Fatal(err)
			}
			st := r.status()[detect.PartitionKey{Server: "thegram"}]
			if st.TooLate == 0 {
				t.Fatalf("the read is not too late (watermark %s, late %d)", st.Watermark, st.Late)
			}
			tr.ticks(20)
			state := func(o outcome) audit.WriteState {
				for k, s := range o.writes {
					if strings.HasPrefix(k, wid+"/") {
						return s
					}
				}
				return "none"
			}
			if tc.windowClosed {
				tr.ticks(180)
			}
			if restart {
				o := r.stop()
				want := audit.StatePending
				if tc.windowClosed {
					want = audit.StateUnverified
				}
				if s := state(o); s != want {
					t.Fatalf("before the restart the write is %s, want %s", s, want)
				}
				clock.Add(time.Second)
				r = openRunStore(t, dir, clock, nil, nil, nil, func(cs *crashStore) {
					forget(cs)
					cs.failWrites.Store(tc.cannotTell)
				})
				tr.r = r
			}
			// Past the write's window (5 m) and the lateness bounds.
			tr.ticks(400)
			logs := r.logs.String()
			again, states := announcedWritesOf(r, wid)
			got := state(r.stop())
			if tc.kept && strings.Contains(logs, "read the writes stored pending") {
				t.Errorf("the replay, passing over the read too late, asked for the writes stored pending:\n%s", logs)
			}
			if tc.windowClosed {
				// Kept, the replay passes over the read and closes the
				// write's window as the live run did, within the lateness
				// bounds of the mark: its state is stored over itself and
				// told the sinks again, as every write state of the last
				// allowed_lateness + lateness before a mark is
				// (docs/detection.md, "Restarts", Limits).
				if got != audit.StateUnverified || again > 0 && !tc.kept {
					t.Errorf("the write, stored unverified before the restart, is stored %s after it, with %d states announced again (%s)", got, again, states)
				}
				return
			}
			if tc.log != "" && !strings.Contains(logs, tc.log) {
				t.Errorf("the log does not say %q:\n%s", tc.log, logs)
			}
			t.Logf("write %s at %s: stored %s", wid, tw.Format(time.TimeOnly), got)
			if got == audit.StatePending {
				t.Errorf("the write is stored pending %s past its window's end: never terminal", clock.Now().Sub(tw.Add(5*time.Minute)).Round(time.Second))
			}
		})
	}
}
