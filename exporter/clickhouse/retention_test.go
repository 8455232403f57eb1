package clickhouse

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestRetention_Fallback runs the retention of servers without TTL: day
// partitions past every tenant's retention are dropped, and the older rows
// of shorter-lived tenants deleted. On servers with TTL the same policy is a
// TTL expression (TestTTLExpr, and the golden DDL).
func TestRetention_Fallback(t *testing.T) {
	o := testOptions(t)
	day := 24 * time.Hour
	o.Retention = Retention{Default: 10 * day, Tenants: map[string]time.Duration{"short": 2 * day, "long": 30 * day}, CheckInterval: time.Hour}
	s := openStore(t, o)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()
	var recs []audit.Record
	for _, tenant := range []string{"short", "long", "other"} {
		for _, age := range []int{1, 5, 20, 40} {
			c := &audit.Call{ID: fmt.Sprintf("%s-%dd", tenant, age), Tenant: tenant, Server: "thegram", Time: now.Add(-time.Duration(age) * day)}
			recs = append(recs, audit.Record{Call: c, Ops: []audit.Op{{Kind: audit.OpRead, Target: "a.gram"}}})
		}
	}
	if _, err := s.AppendCalls(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := s.enforceRetention(ctx, now); err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	if err := s.ScanCalls(ctx, time.Time{}, func(r *audit.Record) error {
		kept[r.Call.ID] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"short-1d": true,
		"long-1d":  true, "long-5d": true, "long-20d": true,
		"other-1d": true, "other-5d": true,
	}
	for id := range want {
		if !kept[id] {
			t.Errorf("%s was deleted; it is within its tenant's retention", id)
		}
	}
	for id := range kept {
		if !want[id] {
			t.Errorf("%s was kept past its tenant's retention", id)
		}
	}
}
