package pipeline_test

import (
	"context"
	"fmt"
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
// acknowledgement) the restart judged it durable.
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
