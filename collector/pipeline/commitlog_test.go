package pipeline_test

import (
	"strings"
	"testing"
	"time"
)

// TestCommitRetryLogged: while the store refuses every commit (a full
// disk), the engine retries at each tick, every 10 ms here, and says so a
// few times a minute, not at each retry.
func TestCommitRetryLogged(t *testing.T) {
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, nil, nil)
	for i := range 20 {
		if _, err := r.ingest(batch(t, "main", callLine("thegram", "s0", i+1, clock.Now().Add(-time.Second)))); err != nil {
			t.Fatal(err)
		}
		clock.Add(time.Second)
	}
	r.cs.crash()
	// The watermark moves on with the clock: each tick has a commit to
	// make, and each fails.
	for range 100 {
		clock.Add(time.Second)
		time.Sleep(10 * time.Millisecond)
	}
	n := strings.Count(r.logs.String(), "cannot commit detector output")
	t.Logf("%d lines about failed commits", n)
	if n == 0 || n > 11 {
		t.Errorf("%d lines about failed commits in 100 ticks, want 1 to 11", n)
	}
}
