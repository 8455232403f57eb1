package pipeline_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_TooLateOtherTenantSameID (rev15a): the same exchange, under
// the same call id, is a pending write judged in time in the default
// tenant, and is delivered too late in tenant acme (each tenant with live
// traffic of its own). The too_late row names acme's call only: the replay
// after a restart judges the default tenant's write, whose window closes
// unverified as it does without a restart.
func TestRestart_TooLateOtherTenantSameID(t *testing.T) {
	type result struct {
		writes   map[string]audit.WriteState
		findings []string
		counts   map[audit.WriteState]int64
		wid      string
	}
	inTenant := func(b audit.Batch, tenant string) audit.Batch {
		for _, r := range b.Records {
			r.Call.Tenant = tenant
		}
		return b
	}
	play := func(t *testing.T, restart bool) result {
		dir := t.TempDir()
		clock := newClock(wallStart)
		r := openRun(t, dir, clock, nil, nil)
		rpc := 0
		tick := func() {
			now := clock.Now()
			for _, tenant := range []string{"", "acme"} {
				for _, src := range []string{"pod-0", "pod-1"} {
					rpc++
					if _, err := r.ingest(inTenant(batch(t, src, callLine("thegram", "s-"+src, rpc, now.Add(-time.Second))), tenant)); err != nil {
						t.Fatal(err)
					}
				}
			}
			clock.Add(time.Second)
		}
		for range 20 {
			tick()
		}
		wline := pendingPatchLine("s9", 900, clock.Now().Add(-time.Second), "team/x.gram")
		write := batch(t, "pod-1", wline)
		if _, err := r.ingest(write); err != nil {
			t.Fatal(err)
		}
		for range 150 {
			tick()
		}
		if _, err := r.ingest(inTenant(batch(t, "pod-1", wline), "acme")); err != nil {
			t.Fatal(err)
		}
		if st := r.status()[detect.PartitionKey{Tenant: "acme", Server: "thegram"}]; st.TooLate != 1 {
			t.Fatalf("acme: %d calls too late, want 1", st.TooLate)
		}
		for range 10 {
			tick()
		}
		if restart {
			r.stop()
			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
		}
		for range 400 {
			tick()
		}
		counts, err := r.store.WriteCounts(context.Background(), audit.CountQuery{})
		if err != nil {
			t.Fatal(err)
		}
		o := r.stop()
		return result{writes: o.writes, findings: slices.Sorted(maps.Keys(o.findings)), counts: counts, wid: ids(write)[0]}
	}
	want := play(t, false)
	if s := want.writes[want.wid+"/0"]; s != audit.StateUnverified {
		t.Fatalf("without a restart the default tenant's write is %s, want unverified", s)
	}
	got := play(t, true)
	if !maps.Equal(got.writes, want.writes) {
		t.Errorf("write states after a restart %v, without one %v", got.writes, want.writes)
	}
	if !slices.Equal(got.findings, want.findings) {
		t.Errorf("findings after a restart %v, without one %v", got.findings, want.findings)
	}
	if !maps.Equal(got.counts, want.counts) {
		t.Errorf("write counts (the SLO's) after a restart %v, without one %v", got.counts, want.counts)
	}
}
