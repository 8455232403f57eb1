package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
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
	for _, ack := range []string{sqlite.AckCommit, sqlite.AckLog} {
		for _, crash := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/crash=%v", ack, crash), func(t *testing.T) {
				_, clock, open := answerRuns(t, ack)
				r := open()
				t0 := wallStart.Add(-time.Minute)
				unanswered, answered := answerLines(t0)
				if _, err := r.ingest(batch(t, "client", unanswered)); err != nil {
					t.Fatal(err)
				}
				clock.Add(time.Second) // the unanswered call committed
				r.status()
				// Acknowledged; the process dies before a commit names it.
				if _, err := r.p.Ingest(context.Background(), batch(t, "server", answered)); err != nil {
					t.Fatal(err)
				}
				stopOrCrash(r, crash)
				clock.Add(time.Second)
				r = open()
				for i := range 10 {
					if _, err := r.ingest(batch(t, "server", callLine("thegram", "s1", 10+i, clock.Now()))); err != nil {
						t.Fatal(err)
					}
					clock.Add(time.Second)
				}
				for range 80 {
					clock.Add(5 * time.Second)
					r.status()
				}
				answeredAfter := storedAnswered(t, r, unanswered)
				after := r.stop()
				if n := countState(after.writes, audit.StateDurable); n != 1 || len(after.findings) > 0 {
					t.Errorf("after the restart: writes %v, findings %v; want one durable write, no finding", after.writes, sortedKeys(after.findings))
				}
				if !answeredAfter {
					t.Errorf("after the restart the store holds the call unanswered, its acknowledged answer aside")
				}
			})
		}
	}
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
	for _, ack := range []string{sqlite.AckCommit, sqlite.AckLog} {
		for _, crash := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/crash=%v", ack, crash), func(t *testing.T) {
				_, clock, open := answerRuns(t, ack)
				r := open()
				t0 := wallStart.Add(-time.Minute)
				_, answered := answerLines(t0)
				unanswered, _ := answerLines(t0.Add(300 * time.Microsecond))
				if a, b := ids(batch(t, "c", unanswered))[0], ids(batch(t, "s", answered))[0]; a != b {
					t.Fatalf("the two observations have ids %s and %s, want one", a, b)
				}
				if _, err := r.ingest(batch(t, "client", unanswered)); err != nil {
					t.Fatal(err)
				}
				if _, err := r.ingest(batch(t, "server", answered)); err != nil {
					t.Fatal(err)
				}
				for i := range 10 {
					if _, err := r.ingest(batch(t, "server", callLine("thegram", "s1", 10+i, t0.Add(time.Duration(i+1)*time.Second)))); err != nil {
						t.Fatal(err)
					}
				}
				for range 6 {
					clock.Add(5 * time.Second)
					r.status()
				}
				before := r.read()
				if !storedAnswered(t, r, unanswered) {
					t.Errorf("the store holds the call unanswered, though the engine judged it answered")
				}
				if n := countState(before.writes, audit.StateDurable); n != 1 || len(before.findings) > 0 {
					t.Fatalf("before the restart: writes %v, findings %v; want one durable write, no finding", before.writes, sortedKeys(before.findings))
				}
				stopOrCrash(r, crash)
				clock.Add(time.Second)
				r = open()
				for range 80 {
					clock.Add(5 * time.Second)
					r.status()
				}
				after := r.stop()
				writesKept(t, before, after)
				if len(after.findings) > 0 {
					t.Errorf("findings after the restart: %v", sortedKeys(after.findings))
				}
			})
		}
	}
}

// TestRestart_LateAnswerDuringReplay (review rev18l): the call is judged
// unanswered (its answer comes 30 s or 150 s late), the process restarts,
// and the answer arrives at once, while the replay holds the call again
// (it re-judges calls back to the replay's horizon). A run without the
// restart drops the answer (the call was judged) and keeps the call
// unanswered; the restarted run must store and judge the same.
func TestRestart_LateAnswerDuringReplay(t *testing.T) {
	for _, gap := range []int{30, 150} {
		for _, ack := range []string{sqlite.AckCommit, sqlite.AckLog} {
			for _, crash := range []bool{false, true} {
				t.Run(fmt.Sprintf("answer_%ds_later/%s/crash=%v", gap, ack, crash), func(t *testing.T) {
					onlyOnceUnderRace(t, gap == 30 && ack == sqlite.AckLog && crash)
					answerDuringReplay(t, gap, ack, crash)
				})
			}
		}
	}
}

func answerDuringReplay(t *testing.T, gap int, ack string, crash bool) {
	opts := sqlite.Options{Synchronous: "normal", Ack: ack}
	type result struct {
		writes   map[string]audit.WriteState
		findings []string
		answered bool
	}
	play := func(t *testing.T, restart bool) result {
		dir := t.TempDir()
		clock := newClock(wallStart)
		r := openRunWith(t, dir, clock, nil, nil, nil, nil, opts)
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
		for range gap {
			tick()
		}
		if restart {
			stopOrCrash(r, crash)
			r = openRunWith(t, dir, clock, nil, nil, nil, nil, opts)
		}
		if _, err := r.ingest(batch(t, "server", answered)); err != nil {
			t.Fatal(err)
		}
		for range 400 {
			tick()
		}
		pg, err := r.store.Calls(context.Background(), audit.CallQuery{IDs: ids(batch(t, "client", unanswered))})
		if err != nil || len(pg.Calls) != 1 {
			t.Fatalf("Calls: %d, %v", len(pg.Calls), err)
		}
		o := r.stop()
		return result{writes: o.writes, findings: sortedKeys(o.findings), answered: pg.Calls[0].Call.Responded}
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

// knownDefect skips a test that pins a defect review rev18l found and did
// not fix, unless MCPAUDIT_REV18L_DEFECTS=1 (run so, it fails).
func knownDefect(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("MCPAUDIT_REV18L_DEFECTS") != "1" {
		t.Skip("known defect (review rev18l), not fixed: " + why)
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
