package pipeline_test

import (
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_AheadCallsStayInTheirPartition: a poster of thegram sent
// calls dated an hour ahead; oddlynew's posters have right clocks. After
// a restart the replay of the stored calls must not take oddlynew's
// watermark ahead of the wall clock with thegram's clamped clock, or
// oddlynew's next calls are judged late, a skew behind.
func TestRestart_AheadCallsStayInTheirPartition(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	rpc := 0
	for range 20 {
		rpc++
		now := clock.Now()
		if _, err := r.ingest(batch(t, "right", callLine("oddlynew", "s0", rpc, now.Add(-time.Second)))); err != nil {
			t.Fatal(err)
		}
		if _, err := r.ingest(batch(t, "ahead", callLine("thegram", "s1", rpc, now.Add(time.Hour)))); err != nil {
			t.Fatal(err)
		}
		clock.Add(time.Second)
	}
	// Both posters go quiet; the collector is restarted a while later.
	clock.Add(20 * time.Second)
	r.status()
	r.stop()
	clock.Add(time.Second)
	r = openRun(t, dir, clock, nil, nil)
	clock.Add(3 * time.Second) // past a new partition's hold
	wall := clock.Now()
	st := r.status()[detect.PartitionKey{Server: "oddlynew"}]
	if ahead := st.Watermark.Sub(wall); ahead > 0 {
		t.Errorf("after the restart oddlynew's watermark is %v ahead of the wall clock; its sources never were", ahead)
	}
	for range 5 {
		rpc++
		if _, err := r.ingest(batch(t, "right", callLine("oddlynew", "s0", rpc, clock.Now().Add(-time.Second)))); err != nil {
			t.Fatal(err)
		}
		clock.Add(time.Second)
	}
	if st := r.status()[detect.PartitionKey{Server: "oddlynew"}]; st.Late != 0 {
		t.Errorf("%d calls of oddlynew's right clock judged late after the restart; want 0", st.Late)
	}
}
