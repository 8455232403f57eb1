package pipeline_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_LateAnswerOfStoredUnansweredCall (live16, found from outside;
// failed on main up to ed891a5, fixed by late18): a write observed without its
// answer (a client observer that timed out) is judged and left waiting for
// its window; its answer (the server's observer, same request and time:
// one call id) comes while the window is still open but after the engine
// stopped holding the first observation in full: 30 s later (a late second
// observation with the response the first missed is dropped, not merged:
// docs/detection.md, Duplicates) or 150 s later (past allowed_lateness:
// a duplicate, not counted too late nor named, since the store held the
// call; counted too late until live21's D4). Live,
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
// (TestRestart_TooLateCallsNotJudgedByReplay). Since late18 the store keeps
// such an answer aside and puts it in the call's place only when the
// engine took it (audit.Results.Answered): the replay reads the call
// unanswered, as the live run judged it. Since fx20a the engine judges an
// answer within allowed_lateness with its call (30 s: the write durable,
// the store holding the call answered); the one 150 s late stays aside.
func TestRestart_LateAnswerOfStoredUnansweredCall(t *testing.T) {
	eachLateAnswerGap(t, lateAnswerRestart)
}

func lateAnswerRestart(t *testing.T, gap int, ack string, crash bool) {
	type result struct {
		writes   map[string]audit.WriteState
		findings []string
		counts   map[audit.WriteState]int64
	}
	play := func(t *testing.T, restart bool) result {
		p := newTwoPods(t, ack)
		p.tick(20)
		unanswered, answered := answerLines(p.clock.Now().Add(-time.Second))
		p.send("client", unanswered)
		// Within the write's window (5 m); 150 s is past allowed_lateness (2 m).
		p.tick(gap)
		p.send("server", answered)
		// Past allowed_lateness the answer, held by the store, is a
		// duplicate, not a call too late (live21's D4).
		if st := p.r.status()[detect.PartitionKey{Server: "thegram"}]; st.TooLate != 0 {
			t.Fatalf("%d calls too late, want none (the answer is a duplicate)", st.TooLate)
		}
		p.tick(10)
		if restart {
			p.restart(crash, time.Second)
		}
		// Past the write's window and the lateness bounds.
		p.tick(400)
		counts, err := p.r.store.WriteCounts(context.Background(), audit.CountQuery{})
		if err != nil {
			t.Fatal(err)
		}
		// The store shows the call as the engine judged it: answered when
		// the answer came within allowed_lateness (fx20a: judged with
		// it, as in order), unanswered when later (the answer kept aside,
		// not lost).
		if got, want := storedAnswered(t, p.r, unanswered), gap <= 120; got != want {
			t.Errorf("the store holds the call answered: %v; want %v, as judged", got, want)
		}
		o := p.r.stop()
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
