package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_TooLateResentNotSkippedWhenJudged (rev15a): a call judged in
// time is sent again (an exporter's retry, an upload given twice, a second
// observer that stalled) more than allowed_lateness later, once the
// detector forgot its first observation: the copy, held by the store, is
// a duplicate (since live21's D4; before, it was counted too late). The replay after a restart
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
			onlyOnceUnderRace(t, resend == "write")
			var wid, againID string
			p := restartPlay{
				live: func(tr *traffic) {
					wline := pendingPatchLine("s9", 900, tr.r.clock.Now().Add(-time.Second), "team/x.gram")
					wid = ids(tr.send(batch(t, "pod-1", wline)))[0]
					tr.ticks(10)
					resent := wline
					if resend == "read" {
						resent = readSyncedLine("s9", 901, tr.r.clock.Now().Add(-time.Second), "team/x.gram")
						tr.send(batch(t, "pod-1", resent))
					}
					// Past allowed_lateness (2 m) and the time the detector
					// remembers a judged observation: the copy is too late.
					tr.ticks(150)
					againID = ids(tr.send(batch(t, "pod-1", resent)))[0]
					// A duplicate, not a call too late: the store held it, and
					// its first observation was judged (live21's D4).
					if st := tr.r.status()[detect.PartitionKey{Server: "thegram"}]; st.TooLate != 0 {
						t.Fatalf("%d calls too late, want none (the copy sent again is a duplicate)", st.TooLate)
					}
					tr.ticks(10)
				},
				last: func(r *run) {
					named, err := r.store.TooLateCalls(context.Background(), time.Time{})
					if err != nil {
						t.Fatal(err)
					}
					for _, c := range named {
						if c.ID == againID {
							t.Errorf("the copy sent again, held by the store, is named too late: the replay would pass over the observation judged in time")
						}
					}
				},
			}
			want := p.play(t, false)
			wantState := audit.StateUnverified
			if resend == "read" {
				wantState = audit.StateDurable
			}
			if s := want.writes[wid+"/0"]; s != wantState {
				t.Fatalf("without a restart the write is %s, want %s", s, wantState)
			}
			sameAfterRestart(t, p.play(t, true), want)
		})
	}
}
