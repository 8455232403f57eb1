package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
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

// TestIngest_TenantShare: four tenants are admitted, so each one's share
// of max_open_calls (60) is 15. acme's exporter lags, so acme's partition
// holds its calls open (the clock stands still: a new partition holds its
// watermark). While half the budget is free acme is not refused for its
// share; past half it is (retryable, naming the tenant), while globex and
// initech are admitted up to their own shares.
func TestIngest_TenantShare(t *testing.T) {
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, func(c *pipeline.Config) { c.MaxOpenCalls = 60 }, nil)
	rpc := 0
	reads := func(tenant string, n int) audit.Batch {
		var lines [][]byte
		for range n {
			rpc++
			lines = append(lines, callLine("thegram", tenant, rpc, wallStart.Add(-time.Hour+time.Duration(rpc)*time.Millisecond)))
		}
		b := batch(t, "calls:"+tenant, lines...)
		for _, rec := range b.Records {
			rec.Call.Tenant = tenant
		}
		return b
	}
	for _, tenant := range []string{"acme", "globex", "initech", "umbrella"} {
		if err := r.p.Admit(tenant, "thegram"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if _, err := r.ingest(reads("acme", 10)); err != nil {
			t.Fatalf("acme's batch %d with half the budget free: %v", i, err)
		}
	}
	_, err := r.ingest(reads("acme", 10))
	var share *pipeline.TenantShareError
	if !errors.As(err, &share) || share.Tenant != "acme" || share.Held != 30 || share.Share != 15 ||
		!errors.Is(err, pipeline.ErrOpenState) || !errors.Is(err, audit.ErrOverloaded) {
		t.Fatalf("acme past half the budget: %v; want a TenantShareError of acme holding 30, share 15 (overloaded)", err)
	}
	for _, tenant := range []string{"globex", "initech"} {
		if _, err := r.ingest(reads(tenant, 10)); err != nil {
			t.Fatalf("%s within its share while acme is refused: %v", tenant, err)
		}
	}
	// globex holds 10, under its share: the request's 10 are what pass it,
	// and the message says so (found from outside: "holds 81 open calls,
	// its share ... is 100" read as a refusal under the share).
	_, err = r.ingest(reads("globex", 10))
	if !errors.As(err, &share) || share.Tenant != "globex" || share.Held != 10 || share.Request != 10 {
		t.Fatalf("globex past its share: %v; want a TenantShareError of globex holding 10, the request 10 more", err)
	}
	if want := `tenant "globex" holds 10 open calls and the request 10 more, past its share of serve.pipeline.max_open_calls, 15`; !strings.Contains(err.Error(), want) {
		t.Errorf("globex refused: %q; want it to say %q", err, want)
	}
	st := r.status()
	for tenant, want := range map[string]int{"acme": 30, "globex": 10, "initech": 10} {
		if b := st[detect.PartitionKey{Tenant: tenant, Server: "thegram"}].Buffered; b != want {
			t.Errorf("%s: %d calls open, want %d", tenant, b, want)
		}
	}
}

// TestIngest_HolderAdmittedAtCap: at max_open_calls, a request of the
// source that holds a partition's watermark back is still taken, for
// taking it is what lets the watermark move and the waiting calls go.
// Found from outside (an exporter 100 s behind beside an on-time one):
// the on-time source fills the budget with small batches, the lagging
// one's larger batch no longer fits, and each refusal counts as a sign of
// life, so it keeps holding its partition while it retries. Nothing was
// judged again until it stopped sending.
func TestIngest_HolderAdmittedAtCap(t *testing.T) {
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, func(c *pipeline.Config) { c.MaxOpenCalls = 50 }, nil)
	t0 := wallStart.Add(-time.Hour)
	rpc := 0
	reads := func(source string, n int, from time.Time) audit.Batch {
		var lines [][]byte
		for i := range n {
			rpc++
			lines = append(lines, callLine("thegram", source, rpc, from.Add(time.Duration(i)*time.Second)))
		}
		return batch(t, "calls:"+source, lines...)
	}
	// The lagging source delivers first, a minute behind the on-time one.
	if _, err := r.ingest(reads("lagging", 1, t0)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ingest(reads("ontime", 10, t0.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	clock.Add(3 * time.Second) // past the hold of a new partition
	for i := range 3 {
		if _, err := r.ingest(reads("ontime", 10, t0.Add(time.Minute+time.Duration(10*(i+1))*time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	st := r.status()[detect.PartitionKey{Server: "thegram"}]
	if st.Buffered != 41 {
		t.Fatalf("%d calls buffered, want 41 (the lagging source holds the watermark back)", st.Buffered)
	}
	// The on-time source fills what is left of the budget.
	if _, err := r.ingest(reads("ontime", 9, t0.Add(2*time.Minute))); err != nil {
		t.Fatal(err)
	}
	// The lagging source's next batch is larger than the room left. It
	// retries every 5 s, longer than the idle timeout in all.
	next := reads("lagging", 20, t0.Add(time.Second))
	var err error
	for range 4 {
		if _, err = r.ingest(next); err == nil {
			break
		}
		clock.Add(5 * time.Second)
		r.status()
	}
	if err != nil {
		t.Fatalf("the source holding the watermark back is refused at the cap: %v; nothing can be judged until it stops", err)
	}
	st = r.status()[detect.PartitionKey{Server: "thegram"}]
	if want := t0.Add(20*time.Second - time.Second); st.Watermark.Before(want) {
		t.Errorf("watermark %s, want it moved to the lagging source's clock (%s)", st.Watermark, want)
	}
	// The on-time source is still refused until room is made.
	_, err = r.ingest(reads("ontime", 10, t0.Add(3*time.Minute)))
	var share *pipeline.TenantShareError
	if !errors.Is(err, pipeline.ErrOpenState) || errors.As(err, &share) {
		t.Errorf("the on-time source at the cap: %v, want ErrOpenState, not a tenant's share (there is one tenant)", err)
	}
}
