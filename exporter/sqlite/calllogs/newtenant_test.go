package calllogs_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
)

// newTenantLogs is the call logs with a tenant's log created right after
// the store lists the tenants whose cuts it chains (armed): a tenant
// whose first call arrives during a retention pass.
type newTenantLogs struct {
	*calllogs.Logs
	armed *atomic.Bool
	rec   audit.Record
	t     *testing.T
}

func (h newTenantLogs) Tenants() []string {
	ts := h.Logs.Tenants()
	if h.armed.CompareAndSwap(true, false) {
		if _, err := h.Logs.Append(context.Background(), []audit.Record{h.rec}); err != nil {
			h.t.Error(err)
		}
	}
	return ts
}

// TestChain_NewTenantDuringRetention: a tenant whose log is created
// between the store chaining the cuts of the logs and the logs cutting is
// not cut (no cut in the cuts file the chain lacks), and verify passes.
// Fails before the store passed the tenants it chained to the logs: the
// logs cut every tenant they had then, and verify reported the new
// tenant's cut "past the last cut the chain records (none)".
func TestChain_NewTenantDuringRetention(t *testing.T) {
	c := newChained(t)
	recs := gen(t, 6).Records(300)
	slices.SortFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	c.write(t, recs)
	logs, err := calllogs.Open(calllogs.Dir(c.dir), c.opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := recs[299]
	rec.Call.Tenant = "newco"
	armed := &atomic.Bool{}
	st := c.open(t, newTenantLogs{Logs: logs, armed: armed, rec: rec, t: t})
	armed.Store(true)
	if _, err := st.DeleteBefore(context.Background(), recs[150].Call.Time); err != nil {
		t.Fatal(err)
	}
	if armed.Load() {
		t.Fatal("the hook did not run: the store did not list the tenants")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	ok, out := c.verify(t, c.dir)
	if !ok || !strings.Contains(out, "in segments retention removed") {
		t.Errorf("verify after a tenant's log was created during retention: want ok:\n%s", out)
	}
}
