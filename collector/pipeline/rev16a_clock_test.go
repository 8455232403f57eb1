package pipeline_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// slowPodTraffic sends, for n seconds of the run's clock, one call a second
// from pod-a (on time) and from pod-slow (dated lag behind), rpc counting
// on from *rpc.
func slowPodTraffic(t *testing.T, r *run, rpc *int, n int, lag time.Duration) {
	t.Helper()
	for range n {
		now := r.clock.Now()
		for pod, at := range map[string]time.Time{"pod-a": now.Add(-time.Second), "pod-slow": now.Add(-lag)} {
			*rpc++
			if _, err := r.ingest(batch(t, pod, callLine("thegram", "s-"+pod, *rpc, at))); err != nil {
				t.Fatal(err)
			}
		}
		r.clock.Add(time.Second)
		r.status()
	}
}

// TestRev16a_ClockBehindAfterRestart: pod-slow's clock is 2 h slow beside
// the on-time pod-a; its calls are too late and counted behind. The state
// file keeps pod-slow among the active sources; after the restart the same
// slow clock's calls are still too late, and gate16's promise is that they
// count behind (and are logged once) as long as the source never delivered
// a call within max_clock_lag. On main at 37ae6cf it failed ("60 of
// pod-slow's calls too late, 0 counted behind"; no clock_behind_calls
// line, McpAuditClockBehind silent): detect.restore set every restored
// source current. The state file now keeps such a source as Behind.
func TestRev16a_ClockBehindAfterRestart(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	rpc := 0
	key := detect.PartitionKey{Server: "thegram"}
	slowPodTraffic(t, r, &rpc, 60, 2*time.Hour)
	first := r.status()[key]
	if first.Behind == 0 {
		t.Fatalf("first run: %d too late, none behind: the test shows nothing", first.TooLate)
	}
	r.stop()
	clock.Add(5 * time.Second)
	r = openRun(t, dir, clock, nil, nil)
	slowPodTraffic(t, r, &rpc, 60, 2*time.Hour)
	ps := r.status()[key]
	logs := r.logs.String()
	r.stop()
	if ps.TooLate == 0 {
		t.Fatalf("second run: pod-slow's calls are not too late (status %+v)", ps.Counts)
	}
	if ps.Behind != ps.TooLate {
		t.Errorf("second run: %d of pod-slow's calls too late, %d counted behind; want all of them (its clock is as slow as before the restart)", ps.TooLate, ps.Behind)
	}
	if !strings.Contains(logs, "kind=clock_behind_calls") {
		t.Errorf("second run: no clock_behind_calls line for pod-slow")
	}
}

// TestRev16a_TenMinutesSlowPod: pod-slow's clock is 10 minutes slow,
// within max_clock_lag (15m). It is current by design, so none of its
// calls count behind; it holds the partition's watermark at its lag, so
// none of its calls should be too late either. What the status says of it
// is logged for the report.
func TestRev16a_TenMinutesSlowPod(t *testing.T) {
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, nil, nil)
	rpc := 0
	slowPodTraffic(t, r, &rpc, 120, 10*time.Minute)
	ps := r.status()[detect.PartitionKey{Server: "thegram"}]
	logs := r.logs.String()
	r.stop()
	t.Logf("status: too_late=%d behind=%d late=%d lag=%v", ps.TooLate, ps.Behind, ps.Late, ps.Lag)
	if ps.TooLate != 0 || ps.Behind != 0 {
		t.Errorf("a pod 10 minutes slow (within max_clock_lag) from its first call: %d calls too late, %d behind; want none\n%s", ps.TooLate, ps.Behind, logs)
	}
}

// TestRev16a_ClockBehindLagZero: with max_clock_lag 0 (the check off), a
// pod 2 h slow holds its partition; nothing counts behind.
func TestRev16a_ClockBehindLagZero(t *testing.T) {
	clock := newClock(wallStart)
	r := openRunDetect(t, t.TempDir(), clock, nil, func(c *detect.Config) { c.MaxClockLag = 0 }, nil)
	rpc := 0
	slowPodTraffic(t, r, &rpc, 60, 2*time.Hour)
	ps := r.status()[detect.PartitionKey{Server: "thegram"}]
	logs := r.logs.String()
	r.stop()
	if ps.Behind != 0 || strings.Contains(logs, "kind=clock_behind_calls") {
		t.Errorf("max_clock_lag 0: %d calls counted behind (too late %d)\n%s", ps.Behind, ps.TooLate, logs)
	}
}
