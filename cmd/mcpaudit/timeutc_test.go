package main

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestTables_TimeSaysUTC (op20's D5): every CLI table with a TIME column
// heads it "TIME (UTC)", as the page heads its columns "time (UTC)":
// mcpaudit calls, findings and timeline (over the API of a real SQLite
// store) and analyze (over a spec example capture).
func TestTables_TimeSaysUTC(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	const doc = "ops/n.gram"
	c := &audit.Call{ID: "c_00000000000000000001", Time: time.Date(2026, 11, 2, 14, 2, 0, 0, time.UTC), Server: "thegram", Session: "s-1", RPCID: "1",
		Method: "tools/call", Tool: "gram_patch", Arguments: []byte(`{"path":"ops/n.gram","base_revision":22}`)}
	rec := audit.Record{Call: c, Dialect: "thegram", Outcome: audit.OutcomeNoResponse, Tool: c.Tool,
		Ops: []audit.Op{{Tool: c.Tool, Kind: audit.OpWrite, Target: doc, Status: audit.OpUncertain}}}
	if _, err := st.AppendCalls(ctx, []audit.Record{rec}); err != nil {
		t.Fatal(err)
	}
	f := audit.Finding{Kind: audit.KindUnverifiedWrite, Severity: audit.KindUnverifiedWrite.Severity(),
		Server: "thegram", Document: doc, Session: "s-1", Time: c.Time, Calls: []string{c.ID}, Summary: "no proof"}
	if err := st.Commit(ctx, audit.Results{Findings: []audit.Finding{f}}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(api.New(st, 0.999).Handler())
	defer hs.Close()
	examples, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "examples", "thegram-*.ndjson"))
	if len(examples) == 0 {
		t.Fatal("no spec example captures in testdata/examples")
	}
	for _, args := range [][]string{
		{"calls", "--api-url", hs.URL},
		{"findings", "--api-url", hs.URL},
		{"timeline", "--api-url", hs.URL, doc},
		append([]string{"analyze", "--progress", "never", "--fail-on", "never"}, examples...),
	} {
		_, out, errs := cliRun(args...)
		var head string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "TIME") {
				head = l
				break
			}
		}
		if !strings.HasPrefix(head, "TIME (UTC) ") {
			t.Errorf("mcpaudit %s: table header %q, want it to begin \"TIME (UTC)\"\n%s%s", args[0], head, out, errs)
		}
	}
}
