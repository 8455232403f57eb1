package pipeline_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestRestart_SettledLiveNotCountedAgain: a write judged pending whose
// read came in time was settled (durable) and stored by the live run. A
// restart whose replay covers it judges the read again and settles it
// again; that is what the live run committed, so the sinks (metrics:
// mcpaudit_writes_total, the pending gauges) must not count it a second
// time, and the store keeps the write as it was. Only a write the store
// holds pending (its read too late to be judged live:
// TestRestart_TooLateReadLeavesWritePending) is stored again.
func TestRestart_SettledLiveNotCountedAgain(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	tr := newTraffic(t, r)
	tr.ticks(20)
	tw := clock.Now().Add(-time.Second)
	write := batch(t, "pod-1", pendingPatchLine("s9", 900, tw, "team/x.gram"))
	if _, err := r.ingest(write); err != nil {
		t.Fatal(err)
	}
	wid := ids(write)[0]
	tr.tick()
	// The read showing it synced, in time.
	if _, err := r.ingest(batch(t, "pod-1", readSyncedLine("s9", 901, clock.Now().Add(-time.Second), "team/x.gram"))); err != nil {
		t.Fatal(err)
	}
	// Well past the lateness bounds (the read is judged and committed) but
	// within the write's window (5 m): the replay covers the write.
	tr.ticks(150)
	announced := func(rec *recorder) map[string]int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		out := map[string]int{}
		for k, n := range rec.writes {
			if strings.HasPrefix(k, wid+"/") {
				out[k] = n
			}
		}
		return out
	}
	if got := announced(r.rec); got[wid+"/0/"+string(audit.StateDurable)] != 1 {
		t.Fatalf("live run announced %v, want the write durable once", got)
	}
	before := r.stop()
	if s := before.writes[wid+"/0"]; s != audit.StateDurable {
		t.Fatalf("before the restart the write is stored %s, want durable", s)
	}
	clock.Add(time.Second)
	rec := newRecorder()
	r = openRun(t, dir, clock, nil, rec)
	tr.r = r
	tr.ticks(400)
	after := r.stop()
	if got := announced(rec); len(got) != 0 {
		t.Errorf("after the restart the sinks were told the write again, settled live before the stop: %v", got)
	}
	if s := after.writes[wid+"/0"]; s != before.writes[wid+"/0"] {
		t.Errorf("the write is stored %s after the restart, %s before", s, before.writes[wid+"/0"])
	}
}
