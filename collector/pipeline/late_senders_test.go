package pipeline_test

import (
	"strings"
	"testing"
	"time"
)

// TestLogLate_EachLineNamesItsSenders: in one status update pod-ahead
// delivers a call dated 10 minutes ahead (clock_ahead_calls) and pod-late
// one 30 s behind the watermark (late_calls). Each line names the source
// whose calls it counts. One list of every source with any of the three
// had the clock_ahead line name a slow pod and the late_calls line a pod
// 10 minutes ahead (found from outside, out24 D3).
func TestLogLate_EachLineNamesItsSenders(t *testing.T) {
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, nil, nil)
	rpc := 0
	line := func(pod string, at time.Time) []byte {
		rpc++
		return callLine("thegram", "s-"+pod, rpc, at)
	}
	for range 30 {
		now := clock.Now()
		if _, err := r.ingest(batch(t, "pod-ahead", line("pod-ahead", now.Add(-time.Second))), batch(t, "pod-late", line("pod-late", now.Add(-time.Second)))); err != nil {
			t.Fatal(err)
		}
		clock.Add(time.Second)
		r.status()
	}
	now := clock.Now()
	if _, err := r.ingest(batch(t, "pod-ahead", line("pod-ahead", now.Add(10*time.Minute))), batch(t, "pod-late", line("pod-late", now.Add(-30*time.Second)))); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Second)
	r.status()
	var late, ahead []string
	for _, l := range strings.Split(r.logs.String(), "\n") {
		switch {
		case strings.Contains(l, "kind=late_calls"):
			late = append(late, l)
		case strings.Contains(l, "kind=clock_ahead_calls"):
			ahead = append(ahead, l)
		}
	}
	if len(late) != 1 || !strings.Contains(late[0], "sources=[pod-late]") {
		t.Errorf("late_calls lines %q, want one naming pod-late alone", late)
	}
	if len(ahead) != 1 || !strings.Contains(ahead[0], "sources=[pod-ahead]") {
		t.Errorf("clock_ahead_calls lines %q, want one naming pod-ahead alone", ahead)
	}
}
