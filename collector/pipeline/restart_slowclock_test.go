package pipeline_test

import (
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_SlowClockQuietAtStop: pod-b's clock is 3 minutes slow
// (within max_clock_lag), beside pod-a's right one. Both go quiet, and
// the collector is restarted while they are: pod-b still held the
// partition at its lag (detect's quiet slow clock), and must hold it again
// after the restart, though it delivered nothing at the stop. When
// traffic resumes, pod-a first, pod-b some seconds later (its sender
// backing off), none of pod-b's calls may be too late.
func TestRestart_SlowClockQuietAtStop(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	key := detect.PartitionKey{Server: "thegram"}
	rpc := 0
	send := func(r *run, pod string) {
		t.Helper()
		rpc++
		at := clock.Now().Add(-time.Second)
		if pod == "pod-b" {
			at = at.Add(-3 * time.Minute)
		}
		if _, err := r.ingest(batch(t, pod, callLine("thegram", "s-"+pod, rpc, at))); err != nil {
			t.Fatal(err)
		}
	}
	traffic := func(r *run, seconds int, pods ...string) {
		for range seconds {
			for _, pod := range pods {
				send(r, pod)
			}
			clock.Add(time.Second)
			r.status()
		}
	}
	r := openRun(t, dir, clock, nil, nil)
	traffic(r, 60, "pod-a", "pod-b")
	traffic(r, 30) // both quiet
	if ps := r.status()[key]; ps.HeldBy != "pod-b" || ps.Lag < 3*time.Minute {
		t.Fatalf("both pods quiet: held by %q, watermark %s behind; want pod-b holding it at its lag", ps.HeldBy, ps.Lag)
	}
	r.stop()
	clock.Add(20 * time.Second)
	r = openRun(t, dir, clock, nil, nil)
	traffic(r, 15, "pod-a")
	traffic(r, 60, "pod-a", "pod-b")
	ps := r.status()[key]
	for _, s := range ps.Sources {
		if s.TooLate != 0 {
			t.Errorf("%s: %d calls too late after the restart, want none", s.Name, s.TooLate)
		}
	}
	if ps.HeldBy != "pod-b" {
		t.Errorf("held by %q, want pod-b, the slow clock", ps.HeldBy)
	}
}
