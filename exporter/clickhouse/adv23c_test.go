package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/mcpaudit/mcpaudit/audit"
)

// bigHistory stores calls of about 20 KB, ten a second over seconds
// seconds, and returns their ids in (time, ID) order as ScanCalls gives
// them.
func bigHistory(t *testing.T, s *Store, seconds int) []string {
	t.Helper()
	start := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	var ids []string
	for sec := 0; sec < seconds; sec += 30 {
		var recs []audit.Record
		for j := sec; j < min(sec+30, seconds); j++ {
			for i, r := range synthCalls(t, 10, start.Add(time.Duration(j)*time.Second), fmt.Sprintf("big%d", j)) {
				c := *r.Call
				c.Arguments = fmt.Appendf(nil, `{"path":"big/%d.gram","text":%q}`, i, strings.Repeat(string(rune('a'+(i+j)%26)), 20_000))
				r.Call = &c
				recs = append(recs, r)
			}
		}
		if _, err := s.AppendCalls(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
	}
	err := s.ScanCalls(context.Background(), time.Time{}, func(r *audit.Record) error {
		ids = append(ids, r.Call.ID)
		return nil
	})
	if err != nil {
		t.Fatalf("ScanCalls without a memory limit: %v", err)
	}
	if len(ids) != 10*seconds {
		t.Fatalf("ScanCalls gave %d calls, want %d", len(ids), 10*seconds)
	}
	return ids
}

// limited is ctx with a per-query memory limit of the server's (the
// SETTINGS of each query of ctx).
func limited(ctx context.Context, bytes int) context.Context {
	return ch.Context(ctx, ch.WithSettings(ch.Settings{"max_memory_usage": bytes}))
}

// TestScanCalls_WaitsForMemoryLimit: a replay query the limit refuses is
// waited for (logged, asked again) until ctx ends, not an error at once:
// serve exited 2 at start on it (adv23's D3), where docs/clickhouse.md has
// it wait for the store.
func TestScanCalls_WaitsForMemoryLimit(t *testing.T) {
	s := openStore(t, testOptions(t))
	bigHistory(t, s, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := s.ScanCalls(limited(ctx, 1<<20), time.Time{}, func(*audit.Record) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "241") {
		t.Fatalf("ScanCalls under a limit no query fits = %v; want it to wait until ctx ends, naming the refusal (code 241)", err)
	}
}
