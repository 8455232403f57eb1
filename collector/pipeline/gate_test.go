package pipeline_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/pipeline"
)

// TestRestart_KnownFindingsForgotten: after a restart the pipeline keeps
// the ids of the stored findings to recognize those the replay makes
// again, and adds every new finding's id. Once every replayed partition
// has judged past its replayed calls by the verify window and the
// lateness bounds, nothing replayed can make a finding again: the ids are
// dropped instead of growing for the life of the process, and no finding
// stored before is announced again.
func TestRestart_KnownFindingsForgotten(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	rpc := 0
	patch := func(r *run, at time.Time) {
		rpc++
		if _, err := r.ingest(batch(t, "calls:live", pendingPatchLine("s1", rpc, at, fmt.Sprintf("team/%d.gram", rpc)))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		patch(r, clock.Now().Add(-30*time.Minute+time.Duration(i)*time.Second))
	}
	clock.Add(7 * time.Minute) // the source is idle: the watermark moves on with the wall clock
	r.status()
	before := r.stop()
	if len(before.findings) != 5 {
		t.Fatalf("%d findings before the restart, want 5 unverified writes", len(before.findings))
	}

	rec := newRecorder()
	r = openRun(t, dir, clock, nil, rec)
	if n := pipeline.KnownFindings(r.p); n != 5 {
		t.Fatalf("after the restart %d known finding ids, want the 5 stored", n)
	}
	// Live traffic with findings of its own, past the replay's reach.
	for i := range 20 {
		clock.Add(time.Minute)
		patch(r, clock.Now().Add(-10*time.Minute+time.Duration(i)*time.Second))
	}
	clock.Add(20 * time.Minute)
	r.status()
	deadline := time.Now().Add(hangCeiling)
	for pipeline.KnownFindings(r.p) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d finding ids still kept long after the replay's reach", pipeline.KnownFindings(r.p))
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, announced := rec.snapshot()
	for id := range before.findings {
		if announced[id] > 0 {
			t.Errorf("finding %s stored before the restart was announced again", id)
		}
	}
	after := r.stop()
	if len(after.findings) != 25 {
		t.Errorf("%d findings after the restart, want the 5 from before and 20 new", len(after.findings))
	}
}
