package pipeline_test

import (
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestLateAfterWindowClosed_WithdrawAfterRestart (rev18w): the write's
// unverified_write was made and committed, the collector restarted, and
// then the late replay that settles the write came. The sinks of the new
// process never saw the finding (the replay passes over what was
// committed), so they must not be told it was withdrawn either: the
// metrics would count a withdrawal without its finding, and
// mcpaudit_findings_total - mcpaudit_findings_withdrawn_total would go
// below zero. The store is still changed (it holds the finding).
func TestLateAfterWindowClosed_WithdrawAfterRestart(t *testing.T) {
	dedit := func(c *detect.Config) { c.VerifyWindow = 20 * time.Second; c.CorrelationWindow = 2 * time.Minute }
	at := wallStart.Add(-time.Minute)
	write := keyedPatchLine("s-a", 1, at, false)
	replay := keyedPatchLine("s-b", 2, at.Add(15*time.Second), true)
	var others [][]byte
	for i := 1; i <= 29; i++ {
		others = append(others, callLine("thegram", "s-o", 100+i, at.Add(time.Duration(i)*time.Second)))
	}
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRunDetect(t, dir, clock, nil, dedit, nil)
	if _, err := r.ingest(batch(t, "calls:reproA", slices.Concat([][]byte{write}, others)...)); err != nil {
		t.Fatal(err)
	}
	clock.Add(3 * time.Second)
	r.status()
	stored := openFindings(r.read())
	if len(stored) != 1 {
		t.Fatalf("%d findings before the restart, want the write's unverified_write: the test shows nothing", len(stored))
	}
	r.stop()

	rec := newRecorder()
	r = openRunDetect(t, dir, clock, nil, dedit, rec)
	r.status()
	clock.Add(9 * time.Second)
	if _, err := r.ingest(batch(t, "calls:reproA", replay)); err != nil {
		t.Fatal(err)
	}
	if st := r.status()[detect.PartitionKey{Server: "thegram"}]; st.Late == 0 {
		t.Fatalf("the replay was not judged late (watermark %s): the test shows nothing", st.Watermark)
	}
	r.steps(4, nil)
	got := r.read()
	r.stop()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	t.Logf("stored open after: %v; sinks told found %v, withdrawn %v", openFindings(got), rec.findings, rec.withdrawn)
	for id, n := range rec.withdrawn {
		if rec.findings[id] < n {
			t.Errorf("finding %s told withdrawn %d times, found %d times in this process: a counter of withdrawals outgrows the findings counter", id, n, rec.findings[id])
		}
	}
}
