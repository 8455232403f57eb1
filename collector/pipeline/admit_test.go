package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// clock is a wall clock the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestAdmit: a tenant may have at most max_servers_per_tenant partitions;
// a new server past it is refused with a ServerLimitError while the
// tenant's known servers and other tenants go on, and once the quiet
// partitions hold nothing and are removed, new servers are admitted again.
func TestAdmit(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	clk := &clock{t: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
	cfg := pipeline.NewDefaultConfig()
	cfg.MaxServersPerTenant = 2
	cfg.CommitEvery = 5 * time.Millisecond
	cfg.Now = clk.now
	dcfg := detect.NewDefaultConfig()
	p, err := pipeline.New(context.Background(), cfg, dcfg, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())

	ingest := func(tenant, server string, i int) {
		t.Helper()
		if err := p.Admit(tenant, server); err != nil {
			t.Fatalf("Admit(%s, %s): %v", tenant, server, err)
		}
		c := &audit.Call{ID: fmt.Sprintf("c_%s_%s_%d", tenant, server, i), Time: clk.now(), Server: server, Tenant: tenant,
			Method: "tools/call", Tool: "read", Responded: true}
		if _, err := p.Ingest(context.Background(), audit.Batch{Source: "test", Records: []*audit.Record{{Call: c, Outcome: audit.OutcomeOK}}}); err != nil {
			t.Fatal(err)
		}
	}
	ingest("acme", "a", 0)
	ingest("acme", "b", 0)
	ingest("acme", "a", 1) // a known server goes on
	ingest("globex", "c", 0)
	var sl *pipeline.ServerLimitError
	if err := p.Admit("acme", "c"); !errors.As(err, &sl) || sl.Tenant != "acme" || sl.Limit != 2 {
		t.Fatalf("Admit of a third server: %v, want a ServerLimitError of acme at 2", err)
	}

	// Hours of quiet: the engine closes every window and removes the
	// partitions, which frees their admissions.
	deadline := time.Now().Add(10 * time.Second)
	for {
		clk.add(time.Minute)
		time.Sleep(10 * time.Millisecond)
		if p.Admit("acme", "c") == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle partitions were never freed")
		}
	}
	parts, _ := p.Status()
	if len(parts) > 2 {
		t.Errorf("%d partitions after the quiet hours, want the new one at most: %v", len(parts), parts)
	}
}
