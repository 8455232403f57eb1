package main

import (
	"context"

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
// since the start (live22's S2), in one query (audit.TooLateCounter: both
// stores count them so). Nil from a store that does not count them.
func countTooLate(ctx context.Context, st audit.Store) (tooLateCounts, error) {
	tc, ok := st.(audit.TooLateCounter)
	if !ok {
		return nil, nil
	}
	n, err := tc.CountTooLate(ctx)
	if err != nil {
		return nil, err
	}
	return tooLateCounts(n), nil
}
