package report_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/access"
	"github.com/mcpaudit/mcpaudit/report"
)

// reportServer serves /api/v1/report as serve mounts it (every method), over an
// empty embedded store, with an ingest credential and a query credential.
func reportServer(t *testing.T) *httptest.Server {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// acme: three durable writes and one unverified, a day before now.
	var ws []audit.Write
	for i, state := range []audit.WriteState{audit.StateDurable, audit.StateDurable, audit.StateDurable, audit.StateUnverified} {
		ws = append(ws, audit.Write{CallID: fmt.Sprintf("c_%020x", i+1), Time: day0.Add(48*time.Hour + time.Duration(i)*time.Minute),
			Server: "thegram", Tenant: "acme", Tool: "gram_patch", Document: "a.gram", State: state, Reason: map[bool]audit.Reason{true: "no_verification"}[state == audit.StateUnverified]})
	}
	if err := st.Commit(context.Background(), audit.Results{Writes: ws, Watermark: day0.Add(72 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
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
	mux.Handle("/api/v1/report", report.Handler(st, q))
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

// TestReportHTTP_Params: the report follows the query API's parameter
// rules: an unknown or repeated parameter is refused with 400, until is
// read as every endpoint reads a time, a target of 1 (100 %) is taken as
// /api/v1/slo takes it, and another method than GET is answered 405 with
// Allow.
func TestReportHTTP_Params(t *testing.T) {
	hs := reportServer(t)
	u := hs.URL + "/api/v1/report?"
	f := func(method, query string, status int, says string) {
		t.Helper()
		got, h, body := get(t, method, u+query, "tok-query")
		if got != status || !strings.Contains(body, says) {
			t.Errorf("%s %s: %d %s, want %d saying %q", method, query, got, body, status, says)
		}
		if status == 405 && h.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s %s: Allow %q, want GET, HEAD", method, query, h.Get("Allow"))
		}
	}
	f("GET", "window=7d&frobnicate=1", 400, `unknown parameter \"frobnicate\"; /api/v1/report takes window, until, server, target, format`)
	f("GET", "window=7d&window=30d", 400, "parameter window: given 2 times; give it once")
	f("GET", "target=0.99&target=0.9", 400, "parameter target: given 2 times")
	// until, as /api/v1/slo reads it.
	f("GET", "until=2026-11-04T12:00:00Z", 200, `"until": "2026-11-04T12:00:00Z"`)
	f("GET", "until="+url.QueryEscape("2026-11-04 12:00"), 200, `"until": "2026-11-04T12:00:00Z"`)
	f("GET", "until=2026-11-04", 200, `"until": "2026-11-04T00:00:00Z"`)
	f("GET", "until=12h", 200, `"until": "2026-11-04T12:00:00Z"`)
	f("GET", "until=yesterday", 400, "parameter until: want an RFC 3339 time, a UTC time such as 2026-12-04 14:02, or a duration")
	f("GET", "until=3000-01-01T00:00:00Z", 400, "parameter until: 3000-01-01T00:00:00Z is outside 1678-2261")
	// A target of 1: no budget; three durable writes of four.
	f("GET", "target=1", 200, `"target": 1,`)
	f("GET", "target=0", 400, "parameter target: want a number in (0, 1]")
	f("GET", "target=1.5", 400, "parameter target: want a number in (0, 1]")
	f("GET", "format=xml", 400, `parameter format: want json, html or md, not \"xml\"`)
	f("POST", "window=7d", 405, "method POST not allowed on /api/v1/report; allowed: GET, HEAD")
	f("DELETE", "", 405, "allowed: GET, HEAD")

	_, _, body := get(t, "GET", u+"target=1", "tok-query")
	var rep struct {
		Target    float64  `json:"target"`
		SLI       *float64 `json:"sli"`
		Remaining *float64 `json:"error_budget_remaining"`
	}
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Target != 1 || rep.SLI == nil || *rep.SLI != 0.75 || rep.Remaining != nil {
		t.Errorf("target=1: target %v, sli %v, budget remaining %v; want 1, 0.75 and null (overspent), as /api/v1/slo", rep.Target, rep.SLI, rep.Remaining)
	}
	_, _, html := get(t, "GET", u+"target=1&format=html", "tok-query")
	if !strings.Contains(html, "A target of 100% leaves no error budget: 1 bad writes overspend it.") || strings.Contains(html, "NaN") || strings.Contains(html, "Inf") {
		t.Errorf("target=1 as html: want the no-budget note and no NaN or Inf:\n%s", html)
	}
}

// TestQueryOf_AsTheAPI: the report reads until and target as the API does.
func TestQueryOf_AsTheAPI(t *testing.T) {
	now := time.Date(2026, 12, 4, 14, 0, 0, 0, time.UTC)
	f := func(until, target string, wantUntil time.Time, wantTarget float64, wantErr string) {
		t.Helper()
		q, err := report.QueryOf("", until, target, 0.999, now)
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("QueryOf(%q, %q): %v, want an error with %q", until, target, err, wantErr)
			}
			return
		}
		if err != nil || !q.Until.Equal(wantUntil) || q.Target != wantTarget {
			t.Errorf("QueryOf(%q, %q) = until %v target %v, %v; want %v, %v", until, target, q.Until, q.Target, err, wantUntil, wantTarget)
		}
	}
	f("", "", now, 0.999, "")
	f("1d", "", now.Add(-24*time.Hour), 0.999, "")
	f("2026-12-01 09:30", "1", time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC), 1, "")
	f("2026-12-01T09:30:00+01:00", "0.99", time.Date(2026, 12, 1, 8, 30, 0, 0, time.UTC), 0.99, "")
	f("soon", "", time.Time{}, 0, "parameter until")
	f("", "NaN", time.Time{}, 0, "parameter target")
}
