package pipeline_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_HoldScalesWithDowntime: the hold after a restart
// (Engine.HoldAfterRestart) lasts as long as serve was down, between
// restart_grace (30 s) and restart_grace_max (3 m), plus the idle timeout,
// with the default settings. Measured from outside (docs/detection.md,
// "Backlogs replayed after an outage"): after an outage of minutes, a gRPC
// sender's reconnect backoff has grown to up to 2 minutes, and a
// Collector's queue comes back 43 s to 150 s after serve listens again,
// its oldest request, held by a consumer still backing off, later still.
// With a fixed 30 s grace that backlog came after the hold: too late to be
// judged, and the windows its reads settle closed without them (false
// unverified_writes). After a quick restart the senders come back at once,
// and the findings must not wait longer than they did with the fixed
// grace.
//
// Two pods of thegram deliver live, one call a second each. w1 (sync
// pending) is read synced 3 s after the stop, a read in the oldest
// request of the queue; w2 is never read: its unverified_write is due.
func TestRestart_HoldScalesWithDowntime(t *testing.T) {
	type scenario struct {
		down time.Duration // how long serve is down
		back time.Duration // when, after the restart, the queue comes
		// held is how much later than the rest the queue's first 5 s come
		// (a consumer still backing off).
		held time.Duration
		// w2Due is the wall time after the restart from which w2's
		// finding must be stored; w2Early the latest at which it must
		// not be yet (the hold is not shorter than restart_grace).
		w2Early, w2Due time.Duration
		log            string
		// kill: the process is killed (the state file is as last saved).
		kill bool
		// hold is how long the status tells the hold lasts after the
		// restart (a second less, killed: the downtime is counted from
		// the last save).
		hold time.Duration
	}
	for name, sc := range map[string]scenario{
		// Down 3 minutes, senders back 90 s after the restart, the oldest
		// request 30 s later.
		"down_3m_senders_back_after_90s": {down: 3 * time.Minute, back: 90 * time.Second, held: 30 * time.Second,
			w2Early: 3 * time.Minute, w2Due: 3*time.Minute + 15*time.Second, log: "downtime=3m0s", hold: 3*time.Minute + 10*time.Second},
		// The same, killed: the downtime is counted from the state file's
		// last save, at most a second before.
		"killed_3m_senders_back_after_90s": {down: 3 * time.Minute, back: 90 * time.Second, held: 30 * time.Second,
			w2Early: 3 * time.Minute, w2Due: 3*time.Minute + 15*time.Second, log: "downtime=3m", kill: true, hold: 3*time.Minute + 10*time.Second},
		// A rolling restart: down 5 s, senders back at once. The hold is
		// restart_grace + idle_timeout (40 s), as before.
		"down_5s_released_after_floor": {down: 5 * time.Second, back: 0, held: 2 * time.Second,
			w2Early: 35 * time.Second, w2Due: 45 * time.Second, log: "downtime=5s", hold: 40 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			onlyOnceUnderRace(t, name == "down_5s_released_after_floor")
			p := newPods(t)
			p.live(30)
			// w1's window (5 m) ends 30 s after the stop, w2's 10 s after
			// the restart: the hold is what keeps it open. Each is
			// delivered live, a second after its time: delivered at the
			// stop, more than allowed_lateness behind, it would be too
			// late, judged neither live nor, since the store keeps which
			// calls came too late, by the replay (the down_5s case's w2
			// was, 4m45s behind, and only the replay used to judge it).
			stop := p.clock.Now().Add(5 * time.Minute)
			restart := stop.Add(sc.down)
			w1 := stop.Add(-4*time.Minute - 30*time.Second)
			w2 := restart.Add(10*time.Second - 5*time.Minute)
			sent1, sent2 := false, false
			for p.clock.Now().Before(stop) {
				if now := p.clock.Now(); !sent1 && !now.Add(-time.Second).Before(w1) {
					p.ingest("pod-1", pendingPatchLine("s-w1", 900001, w1, "team/x.gram"))
					sent1 = true
				}
				if now := p.clock.Now(); !sent2 && !now.Add(-time.Second).Before(w2) {
					p.ingest("pod-0", pendingPatchLine("s-w2", 900003, w2, "team/y.gram"))
					sent2 = true
				}
				p.live(1)
			}
			if st := p.r.status()[detect.PartitionKey{Server: "thegram"}]; st.TooLate != 0 || !sent1 || !sent2 {
				t.Fatalf("before the stop: %d calls too late (w1 sent %v, w2 sent %v), want none", st.TooLate, sent1, sent2)
			}
			if sc.kill {
				p.r.crash()
			} else {
				p.r.stop()
			}
			// What each pod's calls of the downtime are, per second, in
			// the Collector's queue.
			queue := p.queue(stop, sc.down, func(at time.Time) []byte { return readSyncedLine("s-w1", 900002, at, "team/x.gram") })
			p.clock.Add(sc.down)
			p.restart()
			r, clock := p.r, p.clock
			if !strings.Contains(r.logs.String(), sc.log) {
				t.Errorf("the start-up log does not say %q:\n%s", sc.log, r.logs.String())
			}
			// The status tells the hold while it is in force.
			thegram := detect.PartitionKey{Server: "thegram"}
			if st := r.status()[thegram]; st.HeldUntil.After(restart.Add(sc.hold)) || st.HeldUntil.Before(restart.Add(sc.hold-time.Second)) {
				t.Errorf("status after the restart: held until %s, want %s after the restart (%s)", st.HeldUntil, sc.hold, restart.Add(sc.hold))
			}
			// Nothing arrives until the senders reconnect; the wall clock
			// goes on.
			findingAt := time.Duration(-1)
			// each moves the clock on n seconds, a second at a time by
			// tick, noting when the first finding is stored.
			each := func(n int, tick func()) {
				for range n {
					tick()
					r.status()
					if findingAt < 0 && len(r.read().findings) > 0 {
						findingAt = clock.Now().Sub(restart)
					}
				}
			}
			each(int(sc.back/time.Second), func() { clock.Add(time.Second) })
			held, rest := queue[:10], queue[10:]
			p.deliver(rest)
			// Live traffic as the held consumer backs off, then its
			// request, then live traffic until well past the hold.
			step := func(n int) { each(n, func() { p.live(1) }) }
			step(int(sc.held / time.Second))
			p.deliver(held)
			step(int((sc.w2Due - clock.Now().Sub(restart)) / time.Second))
			st := r.status()[thegram]
			if !st.HeldUntil.IsZero() {
				t.Errorf("status %v after the restart, past the hold: still held until %s", clock.Now().Sub(restart), st.HeldUntil)
			}
			t.Logf("after the restart: watermark %s, %d late, %d too late; first finding %v after the restart",
				st.Watermark.Format(time.TimeOnly), st.Late, st.TooLate, findingAt)
			if st.TooLate != 0 {
				t.Errorf("%d calls of the backlog too late to be judged", st.TooLate)
			}
			if findingAt >= 0 && findingAt <= sc.w2Early {
				t.Errorf("a finding was stored %v after the restart, before the hold's end", findingAt)
			}
			o := r.stop()
			var got []string
			for _, f := range o.findings {
				got = append(got, string(f.Kind)+" "+f.Document)
			}
			if len(got) != 1 || got[0] != "unverified_write team/y.gram" {
				t.Errorf("findings %v, want only w2's unverified_write (team/y.gram)", got)
			}
			if findingAt < 0 {
				t.Errorf("w2's finding not stored %v after the restart", sc.w2Due)
			}
		})
	}
}

// TestRestart_StateFileSavedWhileUnchanged: the state file is rewritten
// every 10 s even when nothing in it changed (no partition, or one whose
// watermark waits for a refused source), so that after a crash its saved
// time tells how long the collector was down within that, and the hold
// after the restart is not made longer by the time the file stood still.
func TestRestart_StateFileSavedWhileUnchanged(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	openRun(t, dir, clock, nil, nil)
	saved := func() time.Time {
		var f struct {
			Saved time.Time `json:"saved"`
		}
		b, err := os.ReadFile(filepath.Join(dir, "partitions.json"))
		if err == nil {
			err = json.Unmarshal(b, &f)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return f.Saved
	}
	for i := 0; i < 3; i++ {
		want := clock.Now()
		// The engine goroutine saves at its next commit tick (10 ms).
		for deadline := time.Now().Add(10 * time.Second); saved().Before(want); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the state file was saved at %v, not since %v", saved(), want)
			}
		}
		clock.Add(11 * time.Second)
	}
}
