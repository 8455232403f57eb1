package calllogs_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
)

// open opens a store in a new directory with its calls in call logs of
// opts, the real files on disk.
func open(t *testing.T, dir string, opts calllog.Options) *sqlite.Store {
	t.Helper()
	logs, err := calllogs.Open(calllogs.Dir(dir), opts)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(filepath.Join(dir, "audit.db"), sqlite.Options{Calls: sqlite.CallsLog, CallLog: logs})
	if err != nil {
		logs.Close()
		t.Fatal(err)
	}
	return st
}

// TestConformance_CallsInLog runs the conformance suite against the store
// with its calls in the call logs.
func TestConformance_CallsInLog(t *testing.T) {
	storetest.Run(t, func(t *testing.T) audit.Store { return open(t, t.TempDir(), calllog.Options{}) })
}

// TestOpen_RefusesCallsInTable: a store whose calls table holds calls is
// not opened with calls: log (the two sources are not merged).
func TestOpen_RefusesCallsInTable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.db")
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs := gen(t, 1).Records(10)
	if _, err := st.AppendCalls(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	logs, err := calllogs.Open(calllogs.Dir(dir), calllog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	st, err = sqlite.Open(path, sqlite.Options{Calls: sqlite.CallsLog, CallLog: logs})
	if !errors.Is(err, sqlite.ErrCallsInTable) {
		if err == nil {
			st.Close()
		}
		t.Fatalf("open with calls: log on a calls table of 10 calls: %v, want ErrCallsInTable", err)
	}
}

// TestNewest finds the latest call across tenants.
func TestNewest(t *testing.T) {
	dir := t.TempDir()
	logs, err := calllogs.Open(calllogs.Dir(dir), calllog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	ctx := context.Background()
	if n, err := logs.Newest(ctx); err != nil || !n.IsZero() {
		t.Fatalf("Newest of no call = %v, %v; want zero", n, err)
	}
	recs := gen(t, 2).Records(50)
	var want time.Time
	for i := range recs {
		c := *recs[i].Call
		c.Tenant = []string{"", "acme", "b"}[i%3]
		recs[i].Call = &c
		if c.Time.After(want) {
			want = c.Time
		}
	}
	if _, err := logs.Append(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if n, err := logs.Newest(ctx); err != nil || !n.Equal(want) {
		t.Fatalf("Newest = %v, %v; want %v", n, err, want)
	}
}

func gen(t *testing.T, seed uint64) *storetest.Generator {
	t.Helper()
	g, err := storetest.NewGenerator(seed, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
