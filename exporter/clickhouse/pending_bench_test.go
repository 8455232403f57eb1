package clickhouse

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// BenchmarkWrites_PendingPages times what a restart adds when a replayed
// call settles a write in the range the marks leave open
// (collector/pipeline's pendingWrites): reading every write the store
// holds pending over that range, a page of 1,000 at a time. The store
// holds 100,000 pending writes over 260 s, and as many durable ones among
// them. One op is the whole read.
func BenchmarkWrites_PendingPages(b *testing.B) {
	const pending = 100_000
	s := openStore(b, testOptions(b))
	ctx := context.Background()
	t0 := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	step := 260 * time.Second / pending
	ws := make([]audit.Write, 0, 10_000)
	for i := range 2 * pending {
		st := audit.StatePending
		if i%2 == 1 {
			st = audit.StateDurable
		}
		ws = append(ws, audit.Write{CallID: fmt.Sprintf("c_%020x", i), State: st,
			Time: t0.Add(time.Duration(i/2) * step), Server: "thegram", Tool: "gram_patch",
			Session: "bench", Document: fmt.Sprint("doc-", i%1000)})
		if len(ws) == cap(ws) {
			if err := s.Commit(ctx, audit.Results{Writes: ws}); err != nil {
				b.Fatal(err)
			}
			ws = ws[:0]
		}
	}
	// budget: the read under the pipeline's 2 s budget; it must end at
	// the deadline, not run on (the store given up on, writes stored again).
	b.Run("budget", func(b *testing.B) {
		for range b.N {
			bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			start := time.Now()
			q := audit.WriteQuery{State: audit.StatePending, Since: t0.Add(-time.Millisecond), Until: t0.Add(261 * time.Second), Limit: 1000}
			var err error
			for {
				var pg audit.WritePage
				if pg, err = s.Writes(bctx, q); err != nil || pg.NextCursor == "" {
					break
				}
				q.Cursor = pg.NextCursor
			}
			cancel()
			b.ReportMetric(float64(time.Since(start).Milliseconds()), "ended-ms")
			b.Logf("read ended after %s: %v", time.Since(start).Round(time.Millisecond), err)
		}
	})
	b.Run("all", func(b *testing.B) {
		for range b.N {
			readAll(b, s, t0, pending)
		}
	})
}

func readAll(b *testing.B, s *Store, t0 time.Time, pending int) {
	ctx := context.Background()
	{
		n := 0
		q := audit.WriteQuery{State: audit.StatePending, Since: t0.Add(-time.Millisecond), Until: t0.Add(261 * time.Second), Limit: 1000}
		for {
			pg, err := s.Writes(ctx, q)
			if err != nil {
				b.Fatal(err)
			}
			n += len(pg.Writes)
			if pg.NextCursor == "" {
				break
			}
			q.Cursor = pg.NextCursor
		}
		if n != pending {
			b.Fatalf("read %d pending writes, want %d", n, pending)
		}
	}
}
