package api_test

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/access"
	"github.com/mcpaudit/mcpaudit/internal/ratelog"
)

// TestScopeRefusals: a missing or unknown credential is answered 401 with
// WWW-Authenticate, a known one without the query scope 403 naming the
// credential and the scope, on every endpoint, reads and state changes
// alike (as ingest answers a credential without the ingest scope).
func TestScopeRefusals(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	a, err := access.New(access.Config{}, []access.Entry{
		{Name: "agents-acme", Tenant: "acme", Scopes: access.ScopeIngest, Hash: access.HashToken("tok-ingest")},
		{Name: "scraper", Tenant: "*", Scopes: access.ScopeMetrics, Hash: access.HashToken("tok-metrics")},
		{Name: "oncall", Tenant: "acme", Scopes: access.ScopeQuery, Hash: access.HashToken("tok-query")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	q := api.New(st, 0.999)
	q.Now = func() time.Time { return t0.Add(2 * time.Hour) }
	q.Access = a
	q.Log = ratelog.New(slog.New(slog.NewJSONHandler(&logs, nil)), ratelog.Config{Interval: time.Minute, Burst: 100})
	srv := httptest.NewServer(q.Handler())
	t.Cleanup(srv.Close)
	for _, ep := range []struct{ method, path string }{
		{"GET", "/api/v1/findings"}, {"GET", "/api/v1/findings/counts"}, {"GET", "/api/v1/findings/f_1"},
		{"GET", "/api/v1/writes"}, {"GET", "/api/v1/slo"}, {"GET", "/api/v1/status"},
		{"GET", "/api/v1/calls"}, {"GET", "/api/v1/calls/c_1"}, {"GET", "/api/v1/documents/ops%2Fa.gram/timeline"},
		{"GET", "/api/v1/documents/timeline?name=.."},
		{"POST", "/api/v1/findings/f_1/ack"},
	} {
		for _, tc := range []struct {
			token  string
			status int
			says   string
		}{
			{"", 401, "missing or unknown bearer token"},
			{"tok-wrong", 401, "missing or unknown bearer token"},
			{"tok-ingest", 403, "credential agents-acme may not read (no query scope; it has: ingest)"},
			{"tok-metrics", 403, "credential scraper may not read (no query scope; it has: metrics)"},
		} {
			status, h, body := do(t, ep.method, srv.URL+ep.path, tc.token)
			if status != tc.status || !strings.Contains(string(body), tc.says) {
				t.Errorf("%s %s with %q: %d %s, want %d saying %q", ep.method, ep.path, tc.token, status, body, tc.status, tc.says)
			}
			if got := h.Get("WWW-Authenticate"); (status == 401) != (got != "") {
				t.Errorf("%s %s with %q: %d with WWW-Authenticate %q, want it on 401 only", ep.method, ep.path, tc.token, status, got)
			}
		}
		if status, _, body := do(t, ep.method, srv.URL+ep.path, "tok-query"); status == 401 || status == 403 {
			t.Errorf("%s %s with the query credential: %d %s", ep.method, ep.path, status, body)
		}
	}
	if l := logs.String(); !strings.Contains(l, `"kind":"scope_refused"`) || !strings.Contains(l, `"credential":"agents-acme"`) || strings.Contains(l, "tok-") {
		t.Errorf("logs %s: want scope_refused lines naming the credential, never a token", l)
	}
}
