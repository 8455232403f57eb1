package report

import (
	"context"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

// Stored is where the stored writes of a report's tenant and server lie
// when its window holds none (Report.Stored): api.Stored, which
// /api/v1/slo tells too.
type Stored = api.Stored

// empty reports whether the window holds no write at all, in any state.
func empty(counts map[audit.WriteState]int64) bool {
	for _, n := range counts {
		if n != 0 {
			return false
		}
	}
	return true
}

// storedWrites finds the first and last stored write of q's tenant and
// server, or nil when none is stored (api.StoredWrites).
func storedWrites(ctx context.Context, store audit.Store, q Query) (*Stored, error) {
	return api.StoredWrites(ctx, store, q.Tenant, q.Server)
}
