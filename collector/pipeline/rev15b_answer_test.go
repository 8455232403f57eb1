package pipeline_test

import (
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestRestart_AnswerAfterTheCallWasJudged (review rev15b, same15): one
// exchange seen twice under one call id, the answer coming after the
// engine judged the unanswered observation (its watermark passed it; the
// answer is late, within allowed_lateness). The live engine keeps its
// judgement of the unanswered call and drops the answer as a second
// observation; the store (same15) now keeps the answer in the call's
// place. A restart's replay reads back what the store kept: it must not
// change what the live run stored (write states, findings). On main the
// store keeps the unanswered row, the replay judges what the live run
// judged.
func TestRestart_AnswerAfterTheCallWasJudged(t *testing.T) {
	for _, ack := range []string{sqlite.AckCommit, sqlite.AckLog} {
		t.Run(ack, func(t *testing.T) {
			_, clock, open := answerRuns(t, ack)
			r := open()
			t0 := wallStart.Add(-time.Minute)
			unanswered, answered := answerLines(t0)
			if _, err := r.ingest(batch(t, "client", unanswered)); err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				if _, err := r.ingest(batch(t, "server", callLine("thegram", "s1", 10+i, t0.Add(time.Duration(i+1)*time.Second)))); err != nil {
					t.Fatal(err)
				}
			}
			for range 6 { // past the join wait and the client's idle timeout
				clock.Add(5 * time.Second)
				r.status()
			}
			wm := r.status()[detect.PartitionKey{Server: "thegram"}].Watermark
			if !wm.After(t0) {
				t.Fatalf("the watermark %v has not passed the call at %v: the test shows nothing", wm, t0)
			}
			if _, err := r.ingest(batch(t, "server", answered)); err != nil {
				t.Fatal(err)
			}
			for range 80 {
				clock.Add(5 * time.Second)
				r.status()
			}
			before := r.stop()
			t.Logf("before the restart: writes %v, findings %d", before.writes, len(before.findings))
			clock.Add(time.Second)
			r = open()
			for range 80 {
				clock.Add(5 * time.Second)
				r.status()
			}
			after := r.stop()
			t.Logf("after the restart: writes %v, findings %d", after.writes, len(after.findings))
			writesKept(t, before, after)
			for id, f := range after.findings {
				if _, ok := before.findings[id]; !ok {
					t.Errorf("a finding appeared with the restart: %s %v", f.Kind, f.Calls)
				}
			}
		})
	}
}
