package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestCLI_TenantColumn: findings, calls and timeline over a store where
// tenants acme and globex each hold the same exchange (one call id) on a
// document of one name, with a finding each. Read as every tenant (a data
// dir, as a "*" credential reads serve), each table begins with a TENANT
// column that tells the two apart; --tenant keeps one tenant's rows, with
// no column (op21's D4: the tables showed two identical rows).
func TestCLI_TenantColumn(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	const doc, id = "ops/notes.gram", "c_00000000000000000009"
	for i, tenant := range []string{"acme", "globex"} {
		c := &audit.Call{ID: id, Time: t0.Add(time.Duration(i) * time.Second), Server: "thegram", Tenant: tenant, Session: "s-1",
			RPCID: "1", Method: "tools/call", Tool: "gram_patch", Arguments: []byte(`{"path":"ops/notes.gram"}`), Responded: true}
		rec := audit.Record{Call: c, Dialect: "thegram", Outcome: audit.OutcomeOK, Tool: c.Tool,
			Ops: []audit.Op{{Tool: c.Tool, Kind: audit.OpWrite, Target: doc, Status: audit.OpSucceeded}}}
		if _, err := st.AppendCalls(context.Background(), []audit.Record{rec}); err != nil {
			t.Fatal(err)
		}
		f := audit.Finding{Kind: audit.KindDoubleAppliedWrite, Severity: audit.SeverityCritical, Server: "thegram", Tenant: tenant,
			Document: doc, Session: "s-1", Time: c.Time, Calls: []string{id}, Summary: "twice on " + doc}
		if err := st.Commit(context.Background(), audit.Results{Findings: []audit.Finding{f}}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	cli := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(context.Background(), append(args, "--data-dir", dir), nil, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	// firsts returns the first word of each line after the header, and
	// the header's.
	firsts := func(out string, skip int) (string, []string) {
		lines := strings.Split(strings.TrimSpace(out), "\n")[skip:]
		var rows []string
		for _, l := range lines[1:] {
			rows = append(rows, strings.Fields(l)[0])
		}
		return strings.Fields(lines[0])[0], rows
	}
	for _, tc := range []struct {
		args []string
		skip int // lines before the header
		head string
		rows string
	}{
		{[]string{"findings"}, 0, "TENANT", "acme,globex"},
		{[]string{"calls"}, 0, "TENANT", "acme,globex"},
		{[]string{"timeline", doc}, 1, "TENANT", "acme,acme,globex,globex"},
		{[]string{"findings", "--tenant", "globex"}, 0, "TIME", "2026-11-02"},
		{[]string{"calls", "--tenant", "globex"}, 0, "TIME", "2026-11-02"},
		{[]string{"timeline", doc, "--tenant", "acme"}, 1, "TIME", "2026-11-02,2026-11-02"},
	} {
		head, rows := firsts(cli(tc.args...), tc.skip)
		if head != tc.head || strings.Join(rows, ",") != tc.rows {
			t.Errorf("%v: header begins %q, rows %q; want %q and %q", tc.args, head, rows, tc.head, tc.rows)
		}
	}
}
