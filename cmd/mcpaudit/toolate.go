package main

import (
	"context"
	"errors"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// tooLateCounts counts, by tenant, the calls a store held as stored too
// late to be judged (audit.Store.TooLateCalls) when serve started.
type tooLateCounts map[string]int64

// of returns the count of tenant, of every tenant when it is empty.
func (c tooLateCounts) of(tenant string) int64 {
	if tenant != "" {
		return c[tenant]
	}
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// countTooLate counts the calls st holds as too late, by tenant: those the
// runs before this one counted, which the status counts beside its own
// since the start (live22's S2). Nil from a store that keeps none. A store
// that counts them (audit.TooLateCounter: both stores) answers in one
// query; another has their references read once, at the start (tens of
// bytes each), besides the replay's read of those from its horizon on.
func countTooLate(ctx context.Context, st audit.Store) (tooLateCounts, error) {
	if tc, ok := st.(audit.TooLateCounter); ok {
		n, err := tc.CountTooLate(ctx)
		if err != nil {
			return nil, err
		}
		return tooLateCounts(n), nil
	}
	refs, err := st.TooLateCalls(ctx, time.Time{})
	if errors.Is(err, audit.ErrUnsupported) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c := tooLateCounts{}
	for _, r := range refs {
		c[r.Tenant]++
	}
	return c, nil
}
