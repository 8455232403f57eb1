package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestStatusBar_Tenant: the status bar (max lag, partitions behind,
// watermark) follows the status lines' rules, wired as serve wires it over
// a real engine and store. A real engine holds tenant acme on time and
// tenant globex 90 s behind: a caller of acme sees acme's figures only, a
// caller of globex globex's, the "*" credential both; a caller of a
// tenant with no partition sees no watermark, not the store's (which
// counts every tenant); the sign-in page shows no bar at all.
func TestStatusBar_Tenant(t *testing.T) {
	e := detect.NewEngine(detect.NewDefaultConfig())
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	wall := time.Date(2026, 12, 4, 18, 40, 0, 0, time.UTC)
	id := 0
	for range 60 {
		for _, f := range []struct {
			tenant string
			behind time.Duration
		}{{"acme", time.Second}, {"globex", 90 * time.Second}} {
			id++
			rec := gramRead(t, rd, wall.Add(-f.behind), id)
			rec.Call.Tenant = f.tenant
			e.Add("otlp:thegram/"+f.tenant, rec, wall)
		}
		wall = wall.Add(time.Second)
		e.Tick(wall)
	}
	byTenant := map[string]detect.PartitionStatus{}
	for _, p := range e.Status(wall) {
		byTenant[p.Tenant] = p
	}
	acme, globex := byTenant["acme"], byTenant["globex"]
	if acme.Watermark.IsZero() || globex.Watermark.IsZero() || globex.Lag <= time.Minute || acme.Lag >= time.Minute {
		t.Fatalf("the engine does not hold acme on time and globex behind: %+v", byTenant)
	}

	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// The store's watermark, committed by the pipeline over every tenant.
	stored := wall.Add(-time.Hour)
	if err := st.Commit(context.Background(), audit.Results{Watermark: stored}); err != nil {
		t.Fatal(err)
	}
	q := api.New(st, 0.999)
	q.Now = func() time.Time { return wall }
	ask := func() []detect.PartitionStatus { return e.Status(wall) }
	q.Status = func() ([]detect.PartitionStatus, int64, int) { return ask(), 0, 0 }
	q.Credentials = map[string]api.Credential{
		"root":    {Token: "tok-root", Tenant: "*"},
		"alice":   {Token: "tok-acme", Tenant: "acme"},
		"bob":     {Token: "tok-globex", Tenant: "globex"},
		"charlie": {Token: "tok-initech", Tenant: "initech"},
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	status := WithPartitions(NewMetricsStatus(ctx, prometheus.NewRegistry(), st), ask, time.Minute)
	p, err := New(st, q, Config{}, status, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)

	bar := regexp.MustCompile(`(?s)<div class="status" id="status">.*?max lag <b id="max-lag">([^<]+)</b>.*?partitions behind <b>([^<]+)</b>.*?watermark <b>([^<]+)</b>( \(([^)]+)\))?</span>`)
	lag := func(p detect.PartitionStatus) string { return p.Lag.Round(time.Millisecond).String() }
	ts := funcs["ts"].(func(time.Time) string)

	c := client(t)
	for _, path := range []string{"/", "/login"} {
		if _, page := body(t, c, "GET", hs.URL+path, nil); regexp.MustCompile(`id="status"|max lag|partitions behind`).MatchString(page) {
			t.Errorf("GET %s without a credential shows the status bar:\n%s", path, page)
		}
	}
	if code, page := body(t, c, "POST", hs.URL+"/login", url.Values{"token": {"wrong"}}); code != http.StatusUnauthorized || bar.MatchString(page) {
		t.Errorf("a refused sign-in (%d) shows the status bar", code)
	}

	for _, tc := range []struct {
		token, lag, behind, watermark, holder string
	}{
		{"tok-acme", lag(acme), "0", ts(acme.Watermark), "acme/thegram"},
		{"tok-globex", lag(globex), "1", ts(globex.Watermark), "globex/thegram"},
		{"tok-root", lag(globex), "1", ts(globex.Watermark), "globex/thegram"},
		{"tok-initech", "0s", "0", "none yet", ""},
	} {
		c := client(t)
		body(t, c, "POST", hs.URL+"/login", url.Values{"token": {tc.token}, "next": {"/"}})
		for _, path := range []string{"/", "/slo"} {
			_, page := body(t, c, "GET", hs.URL+path, nil)
			m := bar.FindStringSubmatch(page)
			if m == nil {
				t.Errorf("%s %s: no status bar", tc.token, path)
				continue
			}
			if m[1] != tc.lag || m[2] != tc.behind || m[3] != tc.watermark {
				t.Errorf("%s %s: max lag %s, partitions behind %s, watermark %s; want %s, %s, %s",
					tc.token, path, m[1], m[2], m[3], tc.lag, tc.behind, tc.watermark)
			}
			// The earliest watermark names its partition (nop48: a quiet
			// server from last month made it read a month back, unexplained).
			if m[5] != tc.holder {
				t.Errorf("%s %s: the watermark names partition %q, want %q", tc.token, path, m[5], tc.holder)
			}
		}
	}
}

// TestMetricsStatus_TenantScope: the ingest rate and the store's
// watermark count every tenant (the counter has no tenant label, the
// store keeps one watermark), so NewMetricsStatus shows them to a view of
// every tenant and neither to a view of one tenant. Real registry,
// metrics and store; it waits for the second sample of the counter (5 s).
func TestMetricsStatus_TenantScope(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	stored := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	if err := st.Commit(context.Background(), audit.Results{Watermark: stored}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	status := NewMetricsStatus(ctx, reg, st)
	every := withScope(ctx, "", false, nil)
	var all Status
	for range 1200 { // the sampler's second take, sampleEvery after the first
		m.IngestAccepted(metrics.SourceCallsHTTP, 10)
		if all = status(every); all.IngestRate >= 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if all.IngestRate <= 0 || !all.Watermark.Equal(stored) {
		t.Fatalf("every tenant: ingest %v, watermark %s; want a rate and the store's %s", all.IngestRate, all.Watermark, stored)
	}
	if one := status(withScope(ctx, "acme", false, nil)); one.IngestRate >= 0 || !one.Watermark.IsZero() {
		t.Errorf("tenant acme: ingest %v, watermark %s; want neither (n/a, none yet): both count every tenant", one.IngestRate, one.Watermark)
	}
}
