package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// BenchmarkTooLateCount measures serve's count at start of the calls
// stored too late by earlier runs (the status's too_late_before_start):
// every reference read (TooLateCalls, as before tl24) against one count
// by tenant (CountTooLate), over 100,000 rows of three tenants in a real
// SQLite file. Sub-benchmarks alternate with -count.
func BenchmarkTooLateCount(b *testing.B) {
	const n = 100_000
	s := openTemp(b, Options{})
	defer s.Close()
	ctx := context.Background()
	base := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	refs := make([]audit.CallRef, 0, 1000)
	for i := range n {
		refs = append(refs, audit.CallRef{Tenant: fmt.Sprintf("t%d", i%3), ID: fmt.Sprintf("c_%020x", i), Time: base.Add(time.Duration(i) * time.Millisecond)})
		if len(refs) == cap(refs) || i == n-1 {
			if err := s.Commit(ctx, audit.Results{TooLate: refs}); err != nil {
				b.Fatal(err)
			}
			refs = refs[:0]
		}
	}
	b.Run("read_refs", func(b *testing.B) {
		for b.Loop() {
			got, err := s.TooLateCalls(ctx, time.Time{})
			if err != nil || len(got) != n {
				b.Fatalf("TooLateCalls: %d, %v", len(got), err)
			}
			c := map[string]int64{}
			for _, r := range got {
				c[r.Tenant]++
			}
		}
	})
	b.Run("count", func(b *testing.B) {
		for b.Loop() {
			got, err := s.CountTooLate(ctx)
			if err != nil || got["t0"]+got["t1"]+got["t2"] != n {
				b.Fatalf("CountTooLate: %v, %v", got, err)
			}
		}
	})
}
