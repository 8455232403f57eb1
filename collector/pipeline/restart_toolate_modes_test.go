package pipeline_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestRestart_TooLateSkippedAckLogAndCrash (rev15a): the traffic of
// TestRestart_TooLateCallsNotJudgedByReplay (a read that shows a pending
// write synced and a write that timed out, both delivered too late), over
// a store that acknowledges calls once in its log (ack: log), and with the
// process killed instead of stopped: once after the commit naming the
// calls too late and the state file's save, and once with the state file
// as it was before the calls too late came (the commit done, the save
// lost). In each, the store after the restart holds what the same traffic
// leaves without one.
func TestRestart_TooLateSkippedAckLogAndCrash(t *testing.T) {
	for _, tc := range []struct {
		name string
		ack  string
		// end: "stop", "kill" or "kill_old_state" (the state file of
		// before the calls too late came).
		end string
	}{
		{"ack_log_stop", sqlite.AckLog, "stop"},
		{"ack_log_kill", sqlite.AckLog, "kill"},
		{"ack_commit_kill", sqlite.AckCommit, "kill"},
		{"ack_commit_kill_old_state", sqlite.AckCommit, "kill_old_state"},
		{"ack_log_kill_old_state", sqlite.AckLog, "kill_old_state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onlyOnceUnderRace(t, tc.name == "ack_log_kill")
			opts := sqlite.Options{Synchronous: "normal", Ack: tc.ack}
			var oldMarks []byte
			p := restartPlay{
				open: func(t testing.TB, dir string, clock *testClock) *run {
					return openRunWith(t, dir, clock, nil, nil, nil, nil, opts)
				},
				live: func(tr *traffic) {
					tooLatePairLive(tr, func() {
						var err error
						if oldMarks, err = os.ReadFile(filepath.Join(tr.r.dir, "partitions.json")); err != nil {
							t.Fatal(err)
						}
					})
				},
				end: func(r *run) {
					switch tc.end {
					case "stop":
						r.stop()
					case "kill":
						r.crash()
					case "kill_old_state":
						r.cs.crash()
						r.cs.marks = oldMarks
						r.die()
					}
				},
			}
			want := p.play(t, false)
			got := p.play(t, true)
			sameAfterRestart(t, got, want)
		})
	}
}
