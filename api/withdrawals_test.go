package api_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestStatus_WithdrawalsWaiting (wd21): the status tells, for the asking
// tenant, the withdrawals the store refused that the pipeline retries
// (pipeline.Pipeline.WithdrawalsWaiting), and nothing from a server that
// does not say.
func TestStatus_WithdrawalsWaiting(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q := api.New(st, 0.999)
	q.Status = func() ([]detect.PartitionStatus, int64, int) { return nil, 0, 2 }
	now := time.Date(2026, 12, 6, 13, 0, 0, 0, time.UTC)
	f := func(tenant string, want int) {
		t.Helper()
		out, ok := q.StatusOf(tenant, "", now)
		if !ok {
			t.Fatal("no status")
		}
		if out.WithdrawalsWaiting != want {
			t.Errorf("tenant %q: %d withdrawals waiting, want %d", tenant, out.WithdrawalsWaiting, want)
		}
	}
	f("", 0)
	q.WithdrawalsWaiting = func(tenant string) int { return map[string]int{"": 2, "acme": 2, "other": 0}[tenant] }
	f("", 2)
	f("acme", 2)
	f("other", 0)
}
