package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestRestart_CrashBeforeAnswerNamed_NoStateFile (late18c) is
// TestRestart_CrashBeforeAnswerNamed with the state file gone at the
// restart: no mark says which calls were judged, so the store's watermark
// stands for every mark, and the answer of the call after it, kept aside
// and acknowledged, the process killed before a commit named it, is
// handed to the engine by the replay all the same.
func TestRestart_CrashBeforeAnswerNamed_NoStateFile(t *testing.T) {
	for _, ack := range []string{sqlite.AckCommit, sqlite.AckLog} {
		for _, crash := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/crash=%v", ack, crash), func(t *testing.T) {
				dir, clock, open := answerRuns(t, ack)
				r := open()
				t0 := wallStart.Add(-time.Minute)
				unanswered, answered := answerLines(t0)
				if _, err := r.ingest(batch(t, "client", unanswered)); err != nil {
					t.Fatal(err)
				}
				clock.Add(time.Second)
				r.status()
				if _, err := r.p.Ingest(context.Background(), batch(t, "server", answered)); err != nil {
					t.Fatal(err)
				}
				stopOrCrash(r, crash)
				if err := os.Remove(filepath.Join(dir, "partitions.json")); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
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
