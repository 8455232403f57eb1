package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// TestServe_TenantRetention: a tenant listed in serve.tenant_retention
// loses its calls past its own cutoff; the others keep serve.retention.
func TestServe_TenantRetention(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Serve.Retention = Duration(30 * 24 * time.Hour)
	cfg.Serve.TenantRetention = map[string]Duration{"acme": Duration(time.Hour), "archive": Duration(90 * 24 * time.Hour)}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := startTest(t, cfg)
	now := time.Now()
	g, err := storetest.NewGenerator(3, now)
	if err != nil {
		t.Fatal(err)
	}
	put := func(tenant string, age time.Duration) {
		r := g.Next()
		c := *r.Call
		c.Tenant, c.Time = tenant, now.Add(-age)
		r.Call = &c
		if _, err := s.store.AppendCalls(context.Background(), []audit.Record{r}); err != nil {
			t.Fatal(err)
		}
	}
	put("acme", 2*time.Hour)        // past acme's hour
	put("acme", 10*time.Minute)     // kept
	put("globex", 2*time.Hour)      // kept: 30 days
	put("globex", 40*24*time.Hour)  // past the default
	put("archive", 40*24*time.Hour) // kept: 90 days
	s.expire(context.Background(), now)
	left := map[string]int{}
	if err := s.store.ScanCalls(context.Background(), time.Time{}, func(r *audit.Record) error {
		left[r.Call.Tenant]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"acme": 1, "globex": 1, "archive": 1}; len(left) != 3 || left["acme"] != 1 || left["globex"] != 1 || left["archive"] != 1 {
		t.Fatalf("calls left by tenant: %v, want %v", left, want)
	}

	bad := testConfig(t, t.TempDir())
	bad.Serve.TenantRetention = map[string]Duration{"acme": 0}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "serve.tenant_retention.acme: must be positive") {
		t.Fatalf("Validate with a zero tenant retention = %v", err)
	}
}
