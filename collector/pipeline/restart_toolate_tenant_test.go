package pipeline_test

import (
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
	var wid string
	p := restartPlay{
		tenants: []string{"", "acme"},
		live: func(tr *traffic) {
			wline := pendingPatchLine("s9", 900, tr.r.clock.Now().Add(-time.Second), "team/x.gram")
			wid = ids(tr.send(batch(t, "pod-1", wline)))[0]
			tr.ticks(150)
			tr.send(inTenant(batch(t, "pod-1", wline), "acme"))
			if st := tr.r.status()[detect.PartitionKey{Tenant: "acme", Server: "thegram"}]; st.TooLate != 1 {
				t.Fatalf("acme: %d calls too late, want 1", st.TooLate)
			}
			tr.ticks(10)
		},
	}
	want := p.play(t, false)
	if s := want.writes[wid+"/0"]; s != audit.StateUnverified {
		t.Fatalf("without a restart the default tenant's write is %s, want unverified", s)
	}
	sameAfterRestart(t, p.play(t, true), want)
}
