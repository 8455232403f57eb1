package report_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/access"
	"github.com/mcpaudit/mcpaudit/report"
)

// reportServer serves GET /api/v1/report as serve mounts it, over an
// empty embedded store, with an ingest credential and a query credential.
func reportServer(t *testing.T) *httptest.Server {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	a, err := access.New(access.Config{}, []access.Entry{
		{Name: "agents-acme", Tenant: "acme", Scopes: access.ScopeIngest, Hash: access.HashToken("tok-ingest")},
		{Name: "oncall", Tenant: "acme", Scopes: access.ScopeQuery, Hash: access.HashToken("tok-query")},
	})
	if err != nil {
		t.Fatal(err)
	}
	q := api.New(st, 0.999)
	q.Now = func() time.Time { return day0.Add(72 * time.Hour) }
	q.Access = a
	mux := http.NewServeMux()
	mux.Handle("GET /api/v1/report", report.Handler(st, q))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs
}

func get(t *testing.T, method, u, token string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestReportHTTP_Scope: the report refuses as the query API does: 401 with
// WWW-Authenticate for no or an unknown credential, 403 for one without
// the query scope.
func TestReportHTTP_Scope(t *testing.T) {
	hs := reportServer(t)
	for _, tc := range []struct {
		token  string
		status int
		says   string
	}{
		{"", 401, "missing or unknown bearer token"},
		{"tok-wrong", 401, "missing or unknown bearer token"},
		{"tok-ingest", 403, "credential agents-acme may not read (no query scope; it has: ingest)"},
		{"tok-query", 200, `"sli"`},
	} {
		status, h, body := get(t, "GET", hs.URL+"/api/v1/report", tc.token)
		if status != tc.status || !strings.Contains(body, tc.says) {
			t.Errorf("report with %q: %d %s, want %d saying %q", tc.token, status, body, tc.status, tc.says)
		}
		if (status == 401) != (h.Get("WWW-Authenticate") != "") {
			t.Errorf("report with %q: %d with WWW-Authenticate %q, want it on 401 only", tc.token, status, h.Get("WWW-Authenticate"))
		}
	}
}
