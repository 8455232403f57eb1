package sqlite

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// moveBatch is how many calls MoveCalls appends to the call log at once.
const moveBatch = 2000

// MoveCalls moves every call of the calls table into log (mcpaudit
// migrate-calls), for a store opened with Calls "sqlite" by the only
// process of its data dir: the calls are appended to log in time order, a
// batch at a time (each synced before the next), and, once all are, they
// are deleted from the table as retention deletes calls, each one's hash
// recorded in chain_pruned under a chained pruned entry, so that verify
// finds every calls entry of the chain whole. It returns the calls
// appended and those log held back as already stored (the same id for
// the tenant: a MoveCalls broken off and run again). Broken off (ctx, a
// crash) before the deletion ends, both the table and log hold calls
// (Open with Calls "auto" refuses that); running it again finishes the
// move, appending none twice. Writes, findings, the answers kept aside
// and the calls counted too late name calls by id and stay.
func (s *Store) MoveCalls(ctx context.Context, log CallLog) (moved, held int64, err error) {
	if s.opts.Calls != CallsSQLite || s.clog != nil {
		return 0, 0, errors.New("cannot move calls: the store must keep calls in its table (calls: sqlite, ack: commit)")
	}
	batch := make([]audit.Record, 0, moveBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		h, err := log.Append(ctx, batch)
		if err != nil {
			return fmt.Errorf("cannot move calls into the call log: %w", err)
		}
		moved += int64(len(batch) - len(h))
		held += int64(len(h))
		batch = batch[:0]
		return nil
	}
	err = s.ScanCalls(ctx, time.Time{}, func(r *audit.Record) error {
		batch = append(batch, *r)
		if len(batch) == moveBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return moved, held, err
	}
	// Every call is synced in the log: the table's go, chunk by chunk.
	d := deleteRequest{table: tableCalls, before: math.MaxInt64, from: math.MinInt64}
	for {
		if err := ctx.Err(); err != nil {
			return moved, held, fmt.Errorf("cannot delete the moved calls from the table: %w", err)
		}
		chunk := d
		if _, err := s.submit(ctx, &request{del: &chunk}); err != nil {
			return moved, held, fmt.Errorf("cannot delete the moved calls from the table: %w", err)
		}
		if !chunk.full {
			return moved, held, nil
		}
		d.from = chunk.next
	}
}
