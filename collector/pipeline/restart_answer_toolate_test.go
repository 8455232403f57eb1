package pipeline_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_LateAnswerOfStoredUnansweredCall (live16, found from outside;
// FAILS on main at 2d1c603, hence skipped): a write observed without its
// answer (a client observer that timed out) is judged and left waiting for
// its window; its answer (the server's observer, same request and time:
// one call id) comes while the window is still open but after the engine
// stopped holding the first observation in full: 30 s later (a late second
// observation with the response the first missed is dropped, not merged:
// docs/detection.md, Duplicates) or 150 s later (past allowed_lateness:
// counted too late, and not named, since the store held the call). Live,
// the window closes without the answer: the write is unverified, with an
// unverified_write. But the embedded store took the answer in the
// unanswered row's place (same15), and a restart before the window closes
// replays the answered row and judges the write from its answer: with the
// answer 30 s late the write is stored durable, with it 150 s late it is
// left pending in the store for good (its window never closes again);
// either way no unverified_write, and `mcpaudit slo` counts it durable or
// pending instead of unverified. From outside
// (serve, /v1/calls, kill -9 16 s after the write, verify_window 20 s,
// answer 12 s late): /tmp/live16/tl4.py, GAP=12 SIG=kill vs SIG=none.
// A restart must not change write states, findings or the SLO
// (TestRestart_TooLateCallsNotJudgedByReplay).
func TestRestart_LateAnswerOfStoredUnansweredCall(t *testing.T) {
	if os.Getenv("MCPAUDIT_LIVE16") == "" {
		t.Skip("live16: fails on main (2d1c603): after the restart the write is durable (answer 30 s late) or pending for good (150 s), no unverified_write; remove this skip with the fix (MCPAUDIT_LIVE16=1 runs it)")
	}
	for _, gap := range []int{30, 150} {
		t.Run(fmt.Sprintf("answer_%ds_later", gap), func(t *testing.T) { lateAnswerRestart(t, gap) })
	}
}

func lateAnswerRestart(t *testing.T, gap int) {
	type result struct {
		writes   map[string]audit.WriteState
		findings []string
		counts   map[audit.WriteState]int64
	}
	play := func(t *testing.T, restart bool) result {
		dir := t.TempDir()
		clock := newClock(wallStart)
		r := openRun(t, dir, clock, nil, nil)
		rpc := 0
		tick := func() {
			now := clock.Now()
			for _, src := range []string{"pod-0", "pod-1"} {
				rpc++
				if _, err := r.ingest(batch(t, src, callLine("thegram", "s-"+src, 100+rpc, now.Add(-time.Second)))); err != nil {
					t.Fatal(err)
				}
			}
			clock.Add(time.Second)
		}
		for range 20 {
			tick()
		}
		unanswered, answered := answerLines(clock.Now().Add(-time.Second))
		if _, err := r.ingest(batch(t, "client", unanswered)); err != nil {
			t.Fatal(err)
		}
		// Within the write's window (5 m); 150 s is past allowed_lateness (2 m).
		for range gap {
			tick()
		}
		if _, err := r.ingest(batch(t, "server", answered)); err != nil {
			t.Fatal(err)
		}
		if st := r.status()[detect.PartitionKey{Server: "thegram"}]; gap > 120 && st.TooLate != 1 {
			t.Fatalf("%d calls too late, want the answer", st.TooLate)
		}
		for range 10 {
			tick()
		}
		if restart {
			r.stop()
			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
		}
		// Past the write's window and the lateness bounds.
		for range 400 {
			tick()
		}
		counts, err := r.store.WriteCounts(context.Background(), audit.CountQuery{})
		if err != nil {
			t.Fatal(err)
		}
		o := r.stop()
		return result{writes: o.writes, findings: slices.Sorted(maps.Keys(o.findings)), counts: counts}
	}
	want := play(t, false)
	got := play(t, true)
	t.Logf("without a restart: writes %v, findings %v, counts %v", want.writes, want.findings, want.counts)
	if !maps.Equal(got.writes, want.writes) {
		t.Errorf("write states after a restart %v, without one %v", got.writes, want.writes)
	}
	if !slices.Equal(got.findings, want.findings) {
		t.Errorf("findings after a restart %v, without one %v", got.findings, want.findings)
	}
	if !maps.Equal(got.counts, want.counts) {
		t.Errorf("write counts (the SLO's) after a restart %v, without one %v", got.counts, want.counts)
	}
}
