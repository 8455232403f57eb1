package pipeline_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// lateReplay is live18's reproA with a window of vw (zero: the default):
// a canceled write under the key req-A, the server's other traffic up to
// 9 s past the window's end, and the accepted replay under the key dated
// 5 s before the end, which comes after the window closed (a lagging
// exporter) and settles the write.
type lateReplay struct {
	vw     time.Duration
	dedit  func(*detect.Config)
	write  []byte
	replay []byte
	others [][]byte
	tail   []byte
}

// closeWindow sends the write and the calls that close its window to r,
// commits them, and returns the open findings: the write's
// unverified_write alone, or t fails (the test would show nothing).
func (s lateReplay) closeWindow(t *testing.T, r *run, clock *testClock) []string {
	t.Helper()
	if _, err := r.ingest(batch(t, "calls:reproA", slices.Concat([][]byte{s.write}, s.others)...)); err != nil {
		t.Fatal(err)
	}
	clock.Add(3 * time.Second)
	r.status()
	open := openFindings(r.read())
	if len(open) != 1 {
		t.Fatalf("%d findings before the replay came, want the write's unverified_write: the test shows nothing", len(open))
	}
	return open
}

// sendReplay moves the clock on to the replay's arrival and commits, sets
// the store's fault (r.cs.dieAtCommit, r.cs.failChange), then sends the
// replay and has the engine judge it.
func (s lateReplay) sendReplay(t *testing.T, r *run, clock *testClock, fault *atomic.Bool) {
	t.Helper()
	clock.Add(9 * time.Second)
	r.status()
	fault.Store(true)
	if _, err := r.p.Ingest(context.Background(), batch(t, "calls:reproA", s.replay)); err != nil {
		t.Fatal(err)
	}
	r.status()
}

func newLateReplay(vw time.Duration) lateReplay {
	var s lateReplay
	if vw == 0 {
		vw = detect.NewDefaultConfig().VerifyWindow
	} else {
		s.dedit = func(c *detect.Config) { c.VerifyWindow = vw; c.CorrelationWindow = 2 * time.Minute }
	}
	s.vw = vw
	at := wallStart.Add(-vw - 40*time.Second)
	s.write = keyedPatchLine("s-a", 1, at, false)
	s.replay = keyedPatchLine("s-b", 2, at.Add(vw-5*time.Second), true)
	for i := 1; at.Add(time.Duration(i) * time.Second).Before(at.Add(vw + 10*time.Second)); i++ {
		s.others = append(s.others, callLine("thegram", "s-o", 100+i, at.Add(time.Duration(i)*time.Second)))
	}
	s.tail = callLine("thegram", "s-o", 99999, at.Add(vw+10*time.Minute))
	return s
}

// inOrder returns what the store holds after the calls are judged in time
// order, in one request (what analyze judges).
func (s lateReplay) inOrder(t *testing.T) outcome {
	t.Helper()
	n := int((s.vw - 5*time.Second) / time.Second) // others before the replay
	lines := slices.Concat([][]byte{s.write}, s.others[:n], [][]byte{s.replay}, s.others[n:], [][]byte{s.tail})
	r := openRunDetect(t, t.TempDir(), newClock(wallStart.Add(20*time.Minute)), nil, s.dedit, nil)
	if _, err := r.ingest(batch(t, "calls:reproA", lines...)); err != nil {
		t.Fatal(err)
	}
	r.steps(20, nil)
	return r.stop()
}

// TestRestart_WithdrawLostInCrash: the late replay that settles a write
// whose window closed (its unverified_write stored and told) is stored and
// acknowledged, and the process dies at the next commit, the one that
// would have withdrawn the finding (wd19; rev18w's pinned gap,
// TestLateAfterWindowClosed_CrashBeforeWithdrawal). The restart judges
// the stored calls in time order, settles the write and makes no finding:
// it must withdraw the stored unverified_write as the live run would have
// (state withdrawn, by mcpaudit, a note saying it was at a restart and
// naming the replay), store the write resolved, tell the sinks the
// withdrawal once and not the finding (since wd20; before, nothing: the
// metrics never counted the finding in this process), and a second
// restart must change nothing. Also with ack: log, with the finding
// acknowledged by a person before (its history kept), with the default
// windows (5 m), and with the restarted run stopped at once. On main (7b3868d) every case fails: the finding
// stays open (acknowledged), as rev18w pinned.
func TestRestart_WithdrawLostInCrash(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ack   string
		acked bool
		vw    time.Duration
		// stopAtOnce stops the restarted run at once, before the replay's
		// range is judged, and starts it again: the withdrawal is made at
		// the first commit, not when the range is judged (a stop in
		// between saves marks that may cover the replay's call).
		stopAtOnce bool
	}{
		{"ack_commit", sqlite.AckCommit, false, 20 * time.Second, false},
		{"ack_log", sqlite.AckLog, false, 20 * time.Second, false},
		{"acknowledged_by_a_person", sqlite.AckCommit, true, 20 * time.Second, false},
		{"default_windows", sqlite.AckCommit, false, 0, false},
		{"stopped_at_once", sqlite.AckCommit, false, 20 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newLateReplay(tc.vw)
			want := s.inOrder(t)
			if len(openFindings(want)) != 0 {
				t.Fatalf("judged in time order: findings %v, want none", openFindings(want))
			}
			opts := sqlite.Options{Synchronous: "normal", Ack: tc.ack}
			dir := t.TempDir()
			clock := newClock(wallStart)
			r := openRunWith(t, dir, clock, nil, s.dedit, nil, nil, opts)
			open := s.closeWindow(t, r, clock)
			id := open[0]
			if tc.acked {
				if _, err := r.store.ChangeFinding(context.Background(), audit.FindingChange{FindingID: id, State: audit.FindingAcknowledged, By: "bob", Note: "looking", Time: clock.Now()}); err != nil {
					t.Fatal(err)
				}
			}
			s.sendReplay(t, r, clock, &r.cs.dieAtCommit) // the engine judges the replay; the commit dies
			r.cs.mu.RLock()
			crashed := r.cs.crashed
			r.cs.mu.RUnlock()
			if !crashed {
				t.Fatal("no commit after the replay: the test shows nothing")
			}
			r.die()

			rec := newRecorder()
			r = openRunWith(t, dir, clock, nil, s.dedit, rec, nil, opts)
			if tc.stopAtOnce {
				r.stop()
				r = openRunWith(t, dir, clock, nil, s.dedit, rec, nil, opts)
			}
			clock.Add(10 * time.Minute)
			if _, err := r.ingest(batch(t, "calls:reproA", s.tail)); err != nil {
				t.Fatal(err)
			}
			r.steps(20, nil)
			checkRestartWithdrawn(t, r, id, tc.acked)
			// The withdrawal the restart made is counted, once (wd20: the
			// run that lost it counted it, if at all, in the commit
			// interval before it died; docs/metrics.md), the finding not.
			rec.mu.Lock()
			if len(rec.withdrawn) != 1 || rec.withdrawn[id] != 1 || rec.findings[id] != 0 {
				t.Errorf("sinks told findings %v, withdrawn %v; want %s withdrawn once, no finding: this process never told the finding, and made the withdrawal", rec.findings, rec.withdrawn, id)
			}
			rec.mu.Unlock()
			if !tc.stopAtOnce && !strings.Contains(r.logs.String(), "withdrawn at the restart") {
				t.Errorf("no log line of the withdrawal at the restart:\n%s", r.logs.String())
			}
			got := r.stop()
			sameStored(t, "after the restart", got, want)

			r = openRunWith(t, dir, clock, nil, s.dedit, nil, nil, opts)
			r.steps(20, nil)
			checkRestartWithdrawn(t, r, id, tc.acked)
			sameStored(t, "after a second restart", r.stop(), want)
		})
	}
}

// checkRestartWithdrawn checks that the store holds the finding id
// withdrawn by mcpaudit at a restart, its note naming the replay (session
// s-b), after acknowledged (by bob) when acked, and nothing else in its
// history.
func checkRestartWithdrawn(t *testing.T, r *run, id string, acked bool) {
	t.Helper()
	ctx := context.Background()
	pg, err := r.store.Findings(ctx, audit.FindingQuery{ID: id})
	if err != nil || len(pg.Findings) != 1 {
		t.Fatalf("finding %s by its id: %+v, %v", id, pg.Findings, err)
	}
	replay, err := r.store.Calls(ctx, audit.CallQuery{Session: "s-b"})
	if err != nil || len(replay.Calls) != 1 {
		t.Fatalf("the replay's call: %+v, %v", replay.Calls, err)
	}
	f := pg.Findings[0]
	if f.StateOf() != audit.FindingWithdrawn || f.Status == nil || f.Status.By != "mcpaudit" ||
		!strings.Contains(f.Status.Note, "restart") || !strings.Contains(f.Status.Note, replay.Calls[0].Call.ID) {
		t.Errorf("finding %s: status %+v; want withdrawn by mcpaudit at a restart, the note naming the replay %s", id, f.Status, replay.Calls[0].Call.ID)
	}
	h, err := r.store.FindingHistory(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	var states []audit.FindingState
	for _, c := range h {
		states = append(states, c.State)
	}
	want := []audit.FindingState{audit.FindingWithdrawn}
	if acked {
		want = []audit.FindingState{audit.FindingAcknowledged, audit.FindingWithdrawn}
	}
	if !slices.Equal(states, want) {
		t.Errorf("history of %s: %v, want %v", id, states, want)
	}
}

// TestRestart_WithdrawnBeforeCrashStays: the withdrawal was committed, and
// the process dies after it. The restart's replay judges the write settled
// as the live run did: the finding stays withdrawn, with the live run's
// note and no second change in its history, nothing is made or told
// again, and the store holds what judging in time order gives.
func TestRestart_WithdrawnBeforeCrashStays(t *testing.T) {
	s := newLateReplay(20 * time.Second)
	want := s.inOrder(t)
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRunDetect(t, dir, clock, nil, s.dedit, nil)
	open := s.closeWindow(t, r, clock)
	id := open[0]
	clock.Add(9 * time.Second)
	if _, err := r.ingest(batch(t, "calls:reproA", s.replay)); err != nil {
		t.Fatal(err)
	}
	r.status()
	h, err := r.store.FindingHistory(context.Background(), id, "")
	if err != nil || len(h) != 1 || h[0].State != audit.FindingWithdrawn || strings.Contains(h[0].Note, "restart") {
		t.Fatalf("history before the crash: %+v, %v; want the live run's withdrawal", h, err)
	}
	r.crash()

	rec := newRecorder()
	r = openRunDetect(t, dir, clock, nil, s.dedit, rec)
	clock.Add(10 * time.Minute)
	if _, err := r.ingest(batch(t, "calls:reproA", s.tail)); err != nil {
		t.Fatal(err)
	}
	r.steps(20, nil)
	after, err := r.store.FindingHistory(context.Background(), id, "")
	if err != nil || len(after) != 1 || after[0].Note != h[0].Note {
		t.Errorf("history after the restart: %+v, %v; want the live run's withdrawal alone", after, err)
	}
	rec.mu.Lock()
	if len(rec.withdrawn) != 0 || rec.findings[id] != 0 {
		t.Errorf("sinks told findings %v, withdrawn %v; want neither", rec.findings, rec.withdrawn)
	}
	rec.mu.Unlock()
	if strings.Contains(r.logs.String(), "withdrawn at the restart") {
		t.Errorf("the restart logged a withdrawal of its own")
	}
	sameStored(t, "after the restart", r.stop(), want)
}

// TestRestart_WithdrawOnlyWritesJudged: the restart withdraws only the
// stored unverified_write of a write its replay judges and settles. Here
// the live run's withdrawal was lost in a crash as in
// TestRestart_WithdrawLostInCrash, and then retention, stopped part way,
// deleted the write's call (and its write) but not its finding: the
// replay judges the accepted replay alone (a durable write of its own),
// settles nothing, and must leave the finding open. A restart that
// withdrew every stored unverified_write its replay does not make (a set
// difference) would withdraw it: this guard passes on main, which
// withdraws nothing at a restart.
func TestRestart_WithdrawOnlyWritesJudged(t *testing.T) {
	s := newLateReplay(20 * time.Second)
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRunDetect(t, dir, clock, nil, s.dedit, nil)
	open := s.closeWindow(t, r, clock)
	before := r.read()
	f := before.findings[open[0]]
	s.sendReplay(t, r, clock, &r.cs.dieAtCommit)
	r.die()

	// Retention up to just after the write, part way: its finding stays.
	st, err := sqlite.Open(dir+"/mcpaudit.db", sqlite.Options{Synchronous: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.DeleteBefore(context.Background(), f.Time.Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(context.Background(), audit.Results{Findings: []audit.Finding{f}}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	r = openRunDetect(t, dir, clock, nil, s.dedit, nil)
	clock.Add(10 * time.Minute)
	if _, err := r.ingest(batch(t, "calls:reproA", s.tail)); err != nil {
		t.Fatal(err)
	}
	r.steps(20, nil)
	got := r.stop()
	if g, ok := got.findings[f.ID()]; !ok || g.StateOf() != audit.FindingOpen {
		t.Errorf("finding of the write retention deleted: %+v (present %v); want it open, untouched", g.Status, ok)
	}
	if got.calls[f.Calls[0]] != 0 {
		t.Fatalf("the write's call is still stored: the test shows nothing")
	}
}
