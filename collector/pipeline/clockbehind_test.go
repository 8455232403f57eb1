package pipeline_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestClockBehind_LoggedOncePerSource: beside an on-time pod, pod-slow's
// clock is 2 h slow (more than detect.max_clock_lag) and pod-backlog,
// on time at first, then delivers a backlog 20 minutes old. Both have
// their calls counted too late; only pod-slow's are counted behind, and
// it is logged once (kind=clock_behind_calls), however many of its calls
// come, where pod-backlog is not; the too_late_calls lines tell how many
// of their calls came from such a clock.
func TestClockBehind_LoggedOncePerSource(t *testing.T) {
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, nil, nil)
	send, _ := podSender(t, r)
	for i := range 90 {
		now := clock.Now()
		send("pod-a", now.Add(-time.Second))
		if i >= 30 {
			send("pod-slow", now.Add(-2*time.Hour))
		}
		switch {
		case i < 20:
			send("pod-backlog", now.Add(-time.Second))
		case i >= 60:
			send("pod-backlog", now.Add(-20*time.Minute))
		}
		clock.Add(time.Second)
		r.status()
	}
	ps := r.status()[detect.PartitionKey{Server: "thegram"}]
	if ps.TooLate != 90 || ps.Behind != 60 {
		t.Errorf("%d calls too late, %d of them behind; want 90 (60 of pod-slow, 30 of pod-backlog) and 60", ps.TooLate, ps.Behind)
	}
	var episodes, tooLate []string
	for _, l := range strings.Split(r.logs.String(), "\n") {
		switch {
		case strings.Contains(l, "kind=clock_behind_calls"):
			episodes = append(episodes, l)
		case strings.Contains(l, "kind=too_late_calls"):
			tooLate = append(tooLate, l)
		}
	}
	if len(episodes) != 1 || !strings.Contains(episodes[0], "source=pod-slow") || !strings.Contains(episodes[0], "lag=2h0m") {
		t.Errorf("clock_behind_calls lines %q, want one naming pod-slow, 2 h behind", episodes)
	}
	behind := false
	for _, l := range tooLate {
		behind = behind || strings.Contains(l, "clock_behind=")
	}
	if len(tooLate) == 0 || !behind {
		t.Errorf("too_late_calls lines %q, want some telling the calls behind", tooLate)
	}
}

// podSender returns send, which ingests one call of thegram dated at from
// pod (session s-POD) alone, and next, which numbers the calls it and the
// caller's own batches send.
func podSender(t *testing.T, r *run) (send func(pod string, at time.Time), next func() int) {
	rpc := 0
	next = func() int { rpc++; return rpc }
	send = func(pod string, at time.Time) {
		t.Helper()
		if _, err := r.ingest(batch(t, pod, callLine("thegram", "s-"+pod, next(), at))); err != nil {
			t.Fatal(err)
		}
	}
	return send, next
}
