package pipeline_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
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
	type result struct {
		writes   map[string]audit.WriteState
		findings []string
		counts   map[audit.WriteState]int64
	}
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
			opts := sqlite.Options{Synchronous: "normal", Ack: tc.ack}
			play := func(t *testing.T, restart bool) result {
				dir := t.TempDir()
				clock := newClock(wallStart)
				r := openRunWith(t, dir, clock, nil, nil, nil, nil, opts)
				rpc := 0
				tick := func(pod1 bool) {
					now := clock.Now()
					rpc++
					if _, err := r.ingest(batch(t, "pod-0", callLine("thegram", "s0", rpc, now.Add(-time.Second)))); err != nil {
						t.Fatal(err)
					}
					if pod1 {
						rpc++
						if _, err := r.ingest(batch(t, "pod-1", callLine("thegram", "s1", rpc, now.Add(-time.Second)))); err != nil {
							t.Fatal(err)
						}
					}
					clock.Add(time.Second)
				}
				for range 20 {
					tick(true)
				}
				write := batch(t, "pod-1", pendingPatchLine("s9", 900, clock.Now().Add(-time.Second), "team/x.gram"))
				if _, err := r.ingest(write); err != nil {
					t.Fatal(err)
				}
				tick(true)
				late := batch(t, "pod-1",
					readSyncedLine("s9", 901, clock.Now().Add(-time.Second), "team/x.gram"),
					timeoutPatchLine("s8", 902, clock.Now().Add(-time.Second), "team/y.gram"))
				for range 150 {
					tick(false)
				}
				marksPath := filepath.Join(dir, "partitions.json")
				oldMarks, err := os.ReadFile(marksPath)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := r.ingest(late); err != nil {
					t.Fatal(err)
				}
				if st := r.status()[detect.PartitionKey{Server: "thegram"}]; st.TooLate != 2 {
					t.Fatalf("%d calls too late, want 2", st.TooLate)
				}
				for range 20 {
					tick(true)
				}
				if restart {
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
					clock.Add(time.Second)
					r = openRunWith(t, dir, clock, nil, nil, nil, nil, opts)
				}
				for range 400 {
					tick(true)
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
			if !maps.Equal(got.writes, want.writes) {
				t.Errorf("write states after a restart %v, without one %v", got.writes, want.writes)
			}
			if !slices.Equal(got.findings, want.findings) {
				t.Errorf("findings after a restart %v, without one %v", got.findings, want.findings)
			}
			if !maps.Equal(got.counts, want.counts) {
				t.Errorf("write counts (the SLO's) after a restart %v, without one %v", got.counts, want.counts)
			}
		})
	}
}
