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

// storedWrites finds the first and last stored write of q's tenant and
// server, or nil when none is stored (api.StoredWrites).
func storedWrites(ctx context.Context, store audit.Store, q Query) (*Stored, error) {
	return api.StoredWrites(ctx, store, q.Tenant, q.Server)
}
