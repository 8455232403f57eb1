package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/report"
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
	want := "error budget left: " + report.BudgetLeft(left)
	if !strings.Contains(out.String(), want) || !strings.Contains(want, "none (overspent by 24900.00%)") {
		t.Errorf("slo output lacks %q:\n%s", want, out.String())
	}
	if strings.Contains(out.String(), "-24900") {
		t.Errorf("slo output says the budget as a negative share:\n%s", out.String())
	}
}
