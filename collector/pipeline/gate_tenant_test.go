package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestGate_SameCallIDTwoTenants: the same exporter configured for two
// tenants delivers one pending write under one call id in both. Each
// tenant's write is its own: both are stored pending, then unverified
// when their windows end, and the sinks' pending books of both tenants
// go back to zero. With the gate's maps keyed by call id alone, the
// commit kept one tenant's write of the two and the other tenant's window
// closing was told to the sinks as a new write, never leaving their
// pending books (found by gate16).
func TestGate_SameCallIDTwoTenants(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	rec := newRecorder()
	r := openRun(t, dir, clock, nil, rec)

	line := pendingPatchLine("s1", 7, wallStart.Add(-time.Minute), "team/x.gram")
	a, b := inTenant(batch(t, "pod-0", line), "a"), inTenant(batch(t, "pod-0", line), "b")
	if ids(a)[0] != ids(b)[0] {
		t.Fatalf("the two tenants' calls have ids %s and %s, want one id", ids(a)[0], ids(b)[0])
	}
	if _, err := r.ingest(a, b); err != nil {
		t.Fatal(err)
	}
	states := func() map[string]audit.WriteState {
		t.Helper()
		got := map[string]audit.WriteState{}
		pg, err := r.store.Writes(context.Background(), audit.WriteQuery{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range pg.Writes {
			got[fmt.Sprintf("%s/%s/%d", w.Tenant, w.CallID, w.Seq)] = w.State
		}
		return got
	}
	id := ids(a)[0]
	r.steps(1, nil) // past the join wait: both partitions judge the write
	want := map[string]audit.WriteState{"a/" + id + "/0": audit.StatePending, "b/" + id + "/0": audit.StatePending}
	if got := states(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("judged: stored writes %v, want %v", got, want)
	}
	r.steps(12, nil) // past the verify window
	want = map[string]audit.WriteState{"a/" + id + "/0": audit.StateUnverified, "b/" + id + "/0": audit.StateUnverified}
	if got := states(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("windows ended: stored writes %v, want %v", got, want)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, tenant := range []string{"a", "b"} {
		if n := rec.pending[tenant]; n != 0 {
			t.Errorf("tenant %s: the sinks hold %d writes pending after both windows ended, want 0", tenant, n)
		}
	}
}
