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

// TestRestart_TooLateResentNotSkippedWhenJudged (rev15a): a call judged in
// time is sent again (an exporter's retry, an upload given twice, a second
// observer that stalled) more than allowed_lateness later, once the
// detector forgot its first observation: the copy is counted too late, and
// the store names the call's id in too_late. The replay after a restart
// must still judge the first observation, which the live run judged: a
// restart must not change write states, findings or the SLO (the promise
// of TestRestart_TooLateCallsNotJudgedByReplay). Cases: the copy is of the
// pending write itself (its window must still close, unverified), or of
// the read that settled it (the write must stay durable).
//
// On late15 both cases failed: the replay passes over every call of an id
// named too late (keyed by tenant and id, not by the observation), so the
// first observation, judged live, was not judged again by the replay. Now
// the store tells which calls of a request it held already
// (audit.ResponseComparer), and a held call counted too late is not named:
// the test also checks that the copy's id is not in the store's names.
func TestRestart_TooLateResentNotSkippedWhenJudged(t *testing.T) {
	for _, resend := range []string{"write", "read"} {
		t.Run(resend, func(t *testing.T) {
			type result struct {
				writes   map[string]audit.WriteState
				findings []string
				counts   map[audit.WriteState]int64
				wid      string
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
						if _, err := r.ingest(batch(t, src, callLine("thegram", "s-"+src, rpc, now.Add(-time.Second)))); err != nil {
							t.Fatal(err)
						}
					}
					clock.Add(time.Second)
				}
				for range 20 {
					tick()
				}
				wline := pendingPatchLine("s9", 900, clock.Now().Add(-time.Second), "team/x.gram")
				write := batch(t, "pod-1", wline)
				if _, err := r.ingest(write); err != nil {
					t.Fatal(err)
				}
				for range 10 {
					tick()
				}
				resent := wline
				if resend == "read" {
					resent = readSyncedLine("s9", 901, clock.Now().Add(-time.Second), "team/x.gram")
					if _, err := r.ingest(batch(t, "pod-1", resent)); err != nil {
						t.Fatal(err)
					}
				}
				// Past allowed_lateness (2 m) and the time the detector
				// remembers a judged observation: the copy is too late.
				for range 150 {
					tick()
				}
				again := batch(t, "pod-1", resent)
				if _, err := r.ingest(again); err != nil {
					t.Fatal(err)
				}
				if st := r.status()[detect.PartitionKey{Server: "thegram"}]; st.TooLate != 1 {
					t.Fatalf("%d calls too late, want the copy sent again", st.TooLate)
				}
				for range 10 {
					tick()
				}
				if restart {
					r.stop()
					clock.Add(time.Second)
					r = openRun(t, dir, clock, nil, nil)
				}
				// Past the write's window (5 m) and the lateness bounds.
				for range 400 {
					tick()
				}
				counts, err := r.store.WriteCounts(context.Background(), audit.CountQuery{})
				if err != nil {
					t.Fatal(err)
				}
				named, err := r.store.TooLateCalls(context.Background(), time.Time{})
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range named {
					if c.ID == ids(again)[0] {
						t.Errorf("the copy sent again, held by the store, is named too late: the replay would pass over the observation judged in time")
					}
				}
				o := r.stop()
				return result{writes: o.writes, findings: slices.Sorted(maps.Keys(o.findings)), counts: counts, wid: ids(write)[0]}
			}
			want := play(t, false)
			wantState := audit.StateUnverified
			if resend == "read" {
				wantState = audit.StateDurable
			}
			if s := want.writes[want.wid+"/0"]; s != wantState {
				t.Fatalf("without a restart the write is %s, want %s", s, wantState)
			}
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
