package main

import (
	"bytes"
	"encoding/json"
	"html"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/report"
	"github.com/mcpaudit/mcpaudit/web"
)

// TestSLO_OverspentBudgetSaidLikeThePages: `mcpaudit slo` says an
// overspent error budget the way the /slo page and `mcpaudit report` do
// (report.BudgetLeft), not as a negative share left. Found from outside:
// the three said -24900.0%, none (overspent by 24900.00%) and error
// budget spent 25000.00%.
func TestSLO_OverspentBudgetSaidLikeThePages(t *testing.T) {
	left, sli := -249.0, 0.75
	now := time.Date(2026, 12, 5, 17, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.SLO{Window: "1h", Since: now.Add(-time.Hour), Until: now, Target: 0.999, SLI: &sli, ErrorBudgetRemaining: &left})
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	if err := sloCommand([]string{"--api-url", srv.URL}, &out, &errb); err != nil {
		t.Fatalf("slo: %v\n%s", err, errb.String())
	}
	want := "error budget left: " + report.BudgetLeft(left, 0.999)
	if !strings.Contains(out.String(), want) || !strings.Contains(want, "none: spent 250× (error rate 25% against a budget of 0.1%)") {
		t.Errorf("slo output lacks %q:\n%s", want, out.String())
	}
	if strings.Contains(out.String(), "-24900") {
		t.Errorf("slo output says the budget as a negative share:\n%s", out.String())
	}
}

// TestBudget_OverspentSaidAsTimes: an error rate of 75 % against the 0.1 %
// budget of a 0.999 target is said "none: spent 750× (error rate 75%
// against a budget of 0.1%)" by mcpaudit slo, the report in each format,
// /api/v1/slo (error_budget_left, with error_budget_spent 750) and the /slo
// page, from one real embedded store. Before op46 all of them said "none
// (overspent by 74900.00%)", and slo --fail-under "-74900.0%".
func TestBudget_OverspentSaidAsTimes(t *testing.T) {
	dir := sloStore(t, audit.StateDurable, audit.StateUnverified, audit.StateUnverified, audit.StateUnverified)
	const said = "none: spent 750× (error rate 75% against a budget of 0.1%)"
	code, out, errs := cliRun("slo", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "error budget left: "+said) || strings.Contains(out, "overspent by") {
		t.Errorf("slo: exit %d, stderr %q; want error budget left: %s:\n%s", code, errs, said, out)
	}
	code, _, errs = cliRun("slo", "--data-dir", dir, "--fail-under", "0")
	if code != 1 || !strings.Contains(errs, said) || strings.Contains(errs, "74900") {
		t.Errorf("slo --fail-under 0: exit %d, stderr %q; want 1 saying %s", code, errs, said)
	}
	for _, format := range []string{"md", "html", "json"} {
		code, out, errs := cliRun("report", "--data-dir", dir, "--format", format)
		if code != 0 || !strings.Contains(out, said) || strings.Contains(out, "overspent by") || strings.Contains(out, "74900") {
			t.Errorf("report --format %s: exit %d, stderr %q; want %s:\n%s", format, code, errs, said, out)
		}
	}

	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q := api.New(st, 0.999)
	as := httptest.NewServer(q.Handler())
	defer as.Close()
	resp, err := http.Get(as.URL + "/api/v1/slo?window=1d")
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Remaining *float64 `json:"error_budget_remaining"`
		Spent     *float64 `json:"error_budget_spent"`
		Left      string   `json:"error_budget_left"`
	}
	err = json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	if err != nil || s.Remaining == nil || s.Spent == nil || math.Abs(*s.Remaining+749) > 1e-6 || math.Abs(*s.Spent-750) > 1e-6 || s.Left != said {
		t.Errorf("/api/v1/slo: %v; remaining %v, spent %v, left %q; want -749 (kept), 750 and %q", err, ptr(s.Remaining), ptr(s.Spent), s.Left, said)
	}
	p, err := web.New(st, q, web.Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ps := httptest.NewServer(p.Handler())
	defer ps.Close()
	for _, path := range []string{"/slo", "/"} {
		resp, err := http.Get(ps.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page := html.UnescapeString(string(b))
		if resp.StatusCode != 200 || !strings.Contains(page, said) || strings.Contains(page, "overspent by") || strings.Contains(page, "74900") {
			t.Errorf("GET %s: %d; want the budget left said %s", path, resp.StatusCode, said)
		}
	}
}

func ptr(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}
