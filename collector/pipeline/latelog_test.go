package pipeline_test

import (
	"strings"
	"testing"
	"time"
)

// TestLogLate_SourcesOfEachKind: in one status update pod-ahead sends
// calls dated 10 minutes ahead of the collector's clock (judged on
// arrival, clock_ahead_calls) and pod-late a call 20 s behind its
// partition's watermark (judged late, late_calls). Each line names the
// sources of its own kind only: one list for the three kinds named
// pod-late on the clock-ahead line and pod-ahead on the late line, which
// points whoever follows McpAuditClockAhead's runbook at the wrong pod
// (out24's D3).
func TestLogLate_SourcesOfEachKind(t *testing.T) {
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, nil, nil)
	send, next := podSender(t, r)
	for i := range 60 {
		now := clock.Now()
		send("pod-a", now.Add(-time.Second))
		send("pod-late", now.Add(-time.Second))
		if i >= 10 {
			// One Ingest, so that both counts move within one status
			// update, as they do at serve's rate.
			if _, err := r.ingest(batch(t, "pod-ahead", callLine("thegram", "s-pod-ahead", next(), now.Add(10*time.Minute))),
				batch(t, "pod-late", callLine("thegram", "s-pod-late", next(), now.Add(-20*time.Second)))); err != nil {
				t.Fatal(err)
			}
		}
		clock.Add(time.Second)
		r.status()
	}
	var late, ahead []string
	for _, l := range strings.Split(r.logs.String(), "\n") {
		switch {
		case strings.Contains(l, "kind=late_calls"):
			late = append(late, l)
		case strings.Contains(l, "kind=clock_ahead_calls"):
			ahead = append(ahead, l)
		}
	}
	if len(late) == 0 || len(ahead) == 0 {
		t.Fatalf("late_calls lines %q, clock_ahead_calls lines %q: want some of each", late, ahead)
	}
	for _, l := range late {
		if !strings.Contains(l, "pod-late") || strings.Contains(l, "pod-ahead") || strings.Contains(l, "pod-a ") || strings.Contains(l, "pod-a]") {
			t.Errorf("late_calls line %q: want pod-late named, and neither pod-ahead nor pod-a", l)
		}
	}
	for _, l := range ahead {
		if !strings.Contains(l, "pod-ahead") || strings.Contains(l, "pod-late") {
			t.Errorf("clock_ahead_calls line %q: want pod-ahead named, not pod-late", l)
		}
	}
}
