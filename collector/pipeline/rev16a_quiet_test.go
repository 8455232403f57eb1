package pipeline_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRev16a_TenMinutesSlowPodQuietSpell: pod-slow, 10 minutes slow
// (within max_clock_lag), delivers, goes quiet 20 minutes while pod-a goes
// on, then comes back as slow as before. Its calls after the spell are too
// late (the partition no longer waits for it); the source was current, so
// none count behind and no clock_behind_calls line is written: the
// operator is told only "too_late_calls". This records what the status and
// the log say (the live pass's 21 calls too late beside such a pod); it
// fails if such calls are neither too late nor judged late.
func TestRev16a_TenMinutesSlowPodQuietSpell(t *testing.T) {
	if raceEnabled {
		t.Skip("40 minutes of calls sent one at a time (4,800 synchronous commits): runs without -race only")
	}
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, nil, nil)
	rpc := 0
	send := func(pod string, lag time.Duration) {
		t.Helper()
		rpc++
		if _, err := r.ingest(batch(t, pod, callLine("thegram", "s-"+pod, rpc, clock.Now().Add(-lag)))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 60 * 40 {
		send("pod-a", time.Second)
		if i < 300 || i >= 1500 {
			send("pod-slow", 10*time.Minute)
		}
		clock.Add(time.Second)
		if i%10 == 0 {
			r.status()
		}
	}
	ps := r.status()[detect.PartitionKey{Server: "thegram"}]
	logs := r.logs.String()
	r.stop()
	var lines []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "too_late") || strings.Contains(l, "clock_behind") {
			lines = append(lines, l)
		}
	}
	t.Logf("status: too_late=%d behind=%d late=%d lag=%v\n%s", ps.TooLate, ps.Behind, ps.Late, ps.Lag, strings.Join(lines, "\n"))
	if ps.TooLate+ps.Late == 0 {
		t.Errorf("pod-slow's calls after its quiet spell neither late nor too late: the test shows nothing")
	}
}
