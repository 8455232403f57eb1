package pipeline_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestRestart_CrashBeforeAnswerNamed (review rev18l): the store
// acknowledges an answer of a stored unanswered call once it is kept
// aside; the engine merges it into the waiting call, and the commit that
// would name it (audit.Results.Answered) never comes: the process is
// killed first. The sender, told the answer is stored, does not send it
// again. The call had not been judged: a run that did not crash judges
// the write durable with no finding, and so must the run after the
// restart, or the acknowledged answer is lost to detection (a false
// unverified_write). On main (the store replaced the row before the
// acknowledgement) the restart judged it durable; since late18c the
// replay hands the engine the answers kept aside of the calls no mark
// covers (audit.AnswerKeeper), and the next commit names them.
func TestRestart_CrashBeforeAnswerNamed(t *testing.T) {
	eachAckAndEnd(t, func(t *testing.T, ack string, crash bool) { answerNamedAfterRestart(t, ack, crash, nil) })
}

// TestRestart_AnswerDatedBeforeUnanswered (review rev18l): the two
// observers' clocks put the answer a fraction of a millisecond BEFORE the
// unanswered observation (one call id: the same millisecond). The
// unanswered copy comes first, is stored, and the answer is kept aside;
// the engine keeps the earlier observation (the answer) for the call and
// judges the write durable, but named no answer (OnAnswer fired only when
// the kept observation was the unanswered one), so the store kept the
// call unanswered, and a restart's replay judged the write unverified
// with a false unverified_write.
func TestRestart_AnswerDatedBeforeUnanswered(t *testing.T) {
	eachAckAndEnd(t, func(t *testing.T, ack string, crash bool) {
		t0 := wallStart.Add(-time.Minute)
		_, answered := answerLines(t0)
		unanswered, _ := answerLines(t0.Add(300 * time.Microsecond))
		answerPairRestart(t, ack, crash, t0, unanswered, answered, false)
	})
}

// TestRestart_LateAnswerDuringReplay (review rev18l): the call is judged
// unanswered (its answer comes 30 s or 150 s late), the process restarts,
// and the answer arrives at once, while the replay holds the call again
// (it re-judges calls back to the replay's horizon). A run without the
// restart drops the answer (the call was judged) and keeps the call
// unanswered; the restarted run must store and judge the same.
func TestRestart_LateAnswerDuringReplay(t *testing.T) {
	eachLateAnswerGap(t, answerDuringReplay)
}

func answerDuringReplay(t *testing.T, gap int, ack string, crash bool) {
	type result struct {
		writes   map[string]audit.WriteState
		findings []string
		answered bool
	}
	play := func(t *testing.T, restart bool) result {
		p := newTwoPods(t, ack)
		p.tick(20)
		unanswered, answered := answerLines(p.clock.Now().Add(-time.Second))
		p.send("client", unanswered)
		p.tick(gap)
		if restart {
			p.restart(crash, 0)
		}
		p.send("server", answered)
		p.tick(400)
		stored := storedAnswered(t, p.r, unanswered)
		o := p.r.stop()
		return result{writes: o.writes, findings: sortedKeys(o.findings), answered: stored}
	}
	want := play(t, false)
	got := play(t, true)
	t.Logf("without a restart: %+v", want)
	if fmt.Sprint(got.writes) != fmt.Sprint(want.writes) {
		t.Errorf("write states after a restart %v, without one %v", got.writes, want.writes)
	}
	if fmt.Sprint(got.findings) != fmt.Sprint(want.findings) {
		t.Errorf("findings after a restart %v, without one %v", got.findings, want.findings)
	}
	if got.answered != want.answered {
		t.Errorf("the call stored answered = %v after a restart, %v without one", got.answered, want.answered)
	}
}

// TestRestart_FreedAnswerStoredAsJudged (review rev18l): the write of a
// partition freed as idle was stored and judged without its response;
// after a restart its answer comes (the case of
// TestRestart_FreedResentAnswerCompletes). The engine, which no longer
// holds the call, judges the answer as a new call and stores its write
// state over the stored one, but names no answer (nothing was merged):
// the store keeps the call unanswered, the answer aside. What is stored
// then disagrees with what was judged, and a later restart's replay,
// reading the call unanswered, must not change the write state. Fixed:
// the gate names an answer the engine judged itself (gate.judged).
func TestRestart_FreedAnswerStoredAsJudged(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			clock := newClock(wallStart)
			unanswered, answered := answerLines(wallStart.Add(-time.Minute))
			r, _ := freedThenRestarted(t, resendCase{}, clock, unanswered)
			if _, err := r.ingest(batch(t, "poster", answered)); err != nil {
				t.Fatal(err)
			}
			r.steps(30, nil)
			stored := storedAnswered(t, r, unanswered)
			before := r.read()
			id := ids(batch(t, "poster", answered))[0]
			t.Logf("after the answer: write %s, findings %v, call stored answered %v", writeStateOf(before, id), sortedKeys(before.findings), stored)
			if !stored {
				t.Errorf("the engine judged the answer, the store keeps the call unanswered (the answer aside)")
			}
			dir := r.dir
			stopOrCrash(r, crash)
			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
			r.steps(30, nil)
			after := r.stop()
			writesKept(t, before, after)
			if fmt.Sprint(sortedKeys(after.findings)) != fmt.Sprint(sortedKeys(before.findings)) {
				t.Errorf("findings %v after the restart, %v before", sortedKeys(after.findings), sortedKeys(before.findings))
			}
		})
	}
}
