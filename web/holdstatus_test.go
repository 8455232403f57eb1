package web

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// gramRead is a gram_read call on d.gram at at, read by the dialect.
func gramRead(t *testing.T, rd *dialect.Reader, at time.Time, id int) *audit.Record {
	t.Helper()
	line := fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false}}}`,
		at.Format(time.RFC3339Nano), id%7, id, id)
	dec, err := capture.NewDecoder(bytes.NewReader(line), "line")
	if err != nil {
		t.Fatal(err)
	}
	c, err := dec.Next()
	if err != nil {
		t.Fatal(err)
	}
	return rd.Read(c).Lean()
}

// engineStatusPage is the page over an empty store whose query API reports
// the status of a real engine e at the wall time *wall; setup, when given,
// configures the query API (credentials) before it serves.
func engineStatusPage(t *testing.T, e *detect.Engine, wall *time.Time, setup ...func(*api.Server)) (*httptest.Server, *api.Server) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	q := api.New(st, 0.999)
	q.Now = func() time.Time { return *wall }
	q.Status = func() ([]detect.PartitionStatus, int64, int) { return e.Status(*wall), 0, 0 }
	for _, f := range setup {
		f(q)
	}
	p, err := New(st, q, Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	return hs, q
}

// TestStatusLines_RestartHold: while a partition of a real engine holds
// its watermark after a restart, every page says so with the "Restart
// hold:" line of mcpaudit status (held_until, the calls waiting), and
// stops once the hold is over.
func TestStatusLines_RestartHold(t *testing.T) {
	e := detect.NewEngine(detect.NewDefaultConfig())
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	wall := time.Date(2026, 12, 4, 15, 40, 0, 0, time.UTC)
	id := 0
	live := func(n int) {
		for range n {
			id++
			e.Add("otlp:thegram/pod-0", gramRead(t, rd, wall.Add(-time.Second), id), wall)
			wall = wall.Add(time.Second)
			e.Tick(wall)
		}
	}
	live(60)
	e.HoldAfterRestart(detect.PartitionKey{Server: "thegram"}, wall.Add(-time.Second), wall.Add(40*time.Second))
	hs, q := engineStatusPage(t, e, &wall)
	c := client(t)
	hold := regexp.MustCompile(`<p id="restart-hold">([^<]+)</p>`)

	live(20)
	st, _ := q.StatusOf("", "", wall)
	want, ok := api.RestartHold(st)
	if !ok || st.Partitions[0].HeldUntil == nil {
		t.Fatalf("the engine's status shows no hold: %+v", st)
	}
	for _, path := range []string{"/", "/slo"} {
		_, page := body(t, c, "GET", hs.URL+path, nil)
		m := hold.FindStringSubmatch(page)
		if m == nil || html.UnescapeString(m[1]) != want {
			t.Errorf("%s during the hold: %v, want the line of mcpaudit status:\n%s", path, m, want)
		}
	}
	if !regexp.MustCompile(`Restart hold: 1 partition \(thegram\) waits until 15:41:40Z \(20 s more\)`).MatchString(want) {
		t.Errorf("the line does not give the partition, held_until and the time left: %s", want)
	}

	live(30)
	if _, page := body(t, c, "GET", hs.URL+"/", nil); hold.MatchString(page) {
		t.Errorf("after the hold (%s) the page still shows one", wall)
	}
}

// heldBackEngine is a real engine fed by a pod on time and a pod 90 s
// behind it (inside the allowed lateness: it holds the watermark), and
// the wall time after the feed.
func heldBackEngine(t *testing.T) (*detect.Engine, time.Time) {
	t.Helper()
	e := detect.NewEngine(detect.NewDefaultConfig())
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	wall := time.Date(2026, 12, 4, 14, 33, 40, 0, time.UTC)
	id := 0
	for range 60 {
		id++
		e.Add("otlp:thegram/on-time", gramRead(t, rd, wall.Add(-time.Second), id), wall)
		id++
		e.Add("otlp:thegram/slow", gramRead(t, rd, wall.Add(-90*time.Second), id), wall)
		wall = wall.Add(time.Second)
		e.Tick(wall)
	}
	return e, wall
}

// TestStatusLines_HeldBack: a real engine fed by a pod on time and a pod
// 90 s behind it (inside the allowed lateness: it holds the watermark);
// the page names the pod with the "Held back:" line of mcpaudit status
// (held_by), and a page of a tenant it is not shows none.
func TestStatusLines_HeldBack(t *testing.T) {
	e, wall := heldBackEngine(t)
	hs, q := engineStatusPage(t, e, &wall)
	st, _ := q.StatusOf("", "", wall)
	want, ok := api.HeldBack(st.Partitions[0])
	if !ok || st.Partitions[0].HeldBy != "otlp:thegram/slow" {
		t.Fatalf("the engine's status holds nothing back: %+v", st.Partitions)
	}
	c := client(t)
	held := regexp.MustCompile(`<p class="held-back">([^<]+)</p>`)
	_, page := body(t, c, "GET", hs.URL+"/", nil)
	m := held.FindStringSubmatch(page)
	if m == nil || html.UnescapeString(m[1]) != want {
		t.Errorf("the page: %v, want the line of mcpaudit status:\n%s", m, want)
	}
	if !regexp.MustCompile(`^Held back: \d+ calls of thegram wait for otlp:thegram/slow, whose latest call is 1m3\ds behind`).MatchString(want) {
		t.Errorf("the line does not name the source and its lag: %s", want)
	}
	if _, page := body(t, c, "GET", hs.URL+"/?tenant=acme", nil); held.MatchString(page) {
		t.Errorf("the page of tenant acme shows the default tenant's held-back partition")
	}
}

// TestStatusLines_NotBeforeSignIn: with authentication on, the sign-in
// page (no credential yet: the zero principal, whose empty tenant means
// every tenant) shows no status line, which would name tenants' servers
// and sources to anyone; a signed-in caller of the tenant sees it.
func TestStatusLines_NotBeforeSignIn(t *testing.T) {
	e, wall := heldBackEngine(t)
	hs, _ := engineStatusPage(t, e, &wall, func(q *api.Server) {
		q.Credentials = map[string]api.Credential{"root": {Token: "tok-root", Tenant: "*"}}
	})
	held := regexp.MustCompile(`<p class="held-back">`)

	c := client(t)
	for _, path := range []string{"/", "/login"} {
		if _, page := body(t, c, "GET", hs.URL+path, nil); held.MatchString(page) || strings.Contains(page, "otlp:thegram/slow") {
			t.Errorf("GET %s without a credential shows the status lines:\n%s", path, page)
		}
	}
	if code, page := body(t, c, "POST", hs.URL+"/login", url.Values{"token": {"wrong"}}); code != http.StatusUnauthorized || held.MatchString(page) {
		t.Errorf("a refused sign-in (%d) shows the status lines", code)
	}
	body(t, c, "POST", hs.URL+"/login", url.Values{"token": {"tok-root"}, "next": {"/"}})
	if _, page := body(t, c, "GET", hs.URL+"/", nil); !held.MatchString(page) {
		t.Errorf("signed in with a credential of every tenant, the page shows no held-back line")
	}
}

// TestStatusPage_OneAskPerView: a page view asks the pipeline for its
// status once, for the status bar and the status lines both, wired as
// serve wires them (the query API's Status and WithPartitions ask the same
// pipeline, here a real engine): each ask drains the pipeline's queue and
// ticks its engine, and may commit. Each page asked twice before.
func TestStatusPage_OneAskPerView(t *testing.T) {
	e, wall := heldBackEngine(t)
	var asks atomic.Int32
	ask := func() []detect.PartitionStatus {
		asks.Add(1)
		return e.Status(wall)
	}
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	q := api.New(st, 0.999)
	q.Now = func() time.Time { return wall }
	q.Status = func() ([]detect.PartitionStatus, int64, int) { return ask(), 0, 0 }
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	status := WithPartitions(NewMetricsStatus(ctx, prometheus.NewRegistry(), st), ask, time.Minute)
	want := WithPartitions(func(context.Context) Status { return Status{} }, func() []detect.PartitionStatus { return e.Status(wall) }, time.Minute)(ctx)
	if want.MaxLag <= 0 {
		t.Fatalf("the engine shows no lag: %+v", want)
	}
	p, err := New(st, q, Config{}, status, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	c := client(t)
	lag := regexp.MustCompile(`<b id="max-lag">([^<]+)</b>`)
	for _, path := range []string{"/", "/slo"} {
		asks.Store(0)
		_, page := body(t, c, "GET", hs.URL+path, nil)
		if n := asks.Load(); n != 1 {
			t.Errorf("%s: %d asks of the pipeline, want 1", path, n)
		}
		if m := lag.FindStringSubmatch(page); m == nil || m[1] != want.MaxLag.Round(time.Millisecond).String() {
			t.Errorf("%s: max lag %v, want %s from the pipeline's answer", path, m, want.MaxLag.Round(time.Millisecond))
		}
		if !strings.Contains(page, `<p class="held-back">`) {
			t.Errorf("%s shows no held-back line", path)
		}
	}
}

// TestStatusLines_NoWatermark: while a new server's partition of a real
// engine waits detect.join_wait for its other sources, its calls wait with
// no watermark, and every page says so with the "No watermark yet:" line
// of mcpaudit status; once the partition has a watermark the line is gone.
func TestStatusLines_NoWatermark(t *testing.T) {
	e := detect.NewEngine(detect.NewDefaultConfig())
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	wall := time.Date(2026, 12, 5, 12, 23, 0, 0, time.UTC)
	for id := 1; id <= 3; id++ {
		e.Add("otlp:thegram/pod-a", gramRead(t, rd, wall.Add(-time.Second), id), wall)
	}
	e.Tick(wall.Add(2 * time.Second))
	wall = wall.Add(2 * time.Second)
	hs, q := engineStatusPage(t, e, &wall)
	c := client(t)
	line := regexp.MustCompile(`<p class="no-watermark">([^<]+)</p>`)

	st, _ := q.StatusOf("", "", wall)
	want, ok := api.NoWatermark(st.Partitions[0])
	if !ok {
		t.Fatalf("the engine's partition in its join wait gives no line: %+v", st.Partitions[0])
	}
	for _, path := range []string{"/", "/slo"} {
		_, page := body(t, c, "GET", hs.URL+path, nil)
		m := line.FindStringSubmatch(page)
		if m == nil || html.UnescapeString(m[1]) != want {
			t.Errorf("%s in the join wait: %v, want the line of mcpaudit status:\n%s", path, m, want)
		}
	}

	wall = wall.Add(time.Minute)
	e.Tick(wall)
	if _, page := body(t, c, "GET", hs.URL+"/", nil); line.MatchString(page) {
		t.Errorf("with a watermark (%s) the page still shows the line", wall)
	}
}
