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

// TestTimeline_Withdrawn: mcpaudit timeline, with --data-dir and with
// --api-url, leaves out a finding the collector withdrew, as findings
// --document and the page do, and keeps the one that stands (fx19w; D1 of
// live19: the timeline listed a withdrawn unverified_write with no state,
// as if it stood). A real SQLite store; the API over it in the test.
func TestTimeline_Withdrawn(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 11, 2, 14, 2, 0, 0, time.UTC)
	const doc = "ops/n.gram"
	var fs []audit.Finding
	for i, id := range []string{"c_00000000000000000001", "c_00000000000000000002"} {
		c := &audit.Call{ID: id, Time: t0.Add(time.Duration(i) * time.Second), Server: "thegram", Session: "s-1", RPCID: "1",
			Method: "tools/call", Tool: "gram_patch", Arguments: []byte(`{"path":"ops/n.gram","base_revision":22,"request_id":"r` + id + `"}`)}
		rec := audit.Record{Call: c, Dialect: "thegram", Outcome: audit.OutcomeNoResponse, Tool: c.Tool,
			Ops: []audit.Op{{Tool: c.Tool, Kind: audit.OpWrite, Target: doc, Status: audit.OpUncertain}}}
		if _, err := st.AppendCalls(ctx, []audit.Record{rec}); err != nil {
			t.Fatal(err)
		}
		fs = append(fs, audit.Finding{Kind: audit.KindUnverifiedWrite, Severity: audit.KindUnverifiedWrite.Severity(),
			Server: "thegram", Document: doc, Session: "s-1", Time: c.Time, Calls: []string{id}, Summary: "no proof " + id})
	}
	if err := st.Commit(ctx, audit.Results{Findings: fs}); err != nil {
		t.Fatal(err)
	}
	gone, stands := fs[0].ID(), fs[1].ID()
	if _, err := st.ChangeFinding(ctx, audit.FindingChange{FindingID: gone, State: audit.FindingWithdrawn, By: "mcpaudit",
		Note: "withdrawn by call c_3", Time: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	check := func(how string, args ...string) {
		t.Helper()
		code, out, errs := cliRun(args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", how, code, errs)
		}
		if strings.Contains(out, gone) || strings.Contains(out, "no proof c_00000000000000000001") {
			t.Errorf("%s lists the withdrawn finding %s:\n%s", how, gone, out)
		}
		if !strings.Contains(out, stands) && !strings.Contains(out, "no proof c_00000000000000000002") {
			t.Errorf("%s lacks the finding that stands %s:\n%s", how, stands, out)
		}
	}
	check("findings --document --data-dir", "findings", "--data-dir", dir, "--document", doc)
	check("timeline --data-dir", "timeline", "--data-dir", dir, doc)
	check("timeline --data-dir --format json", "timeline", "--data-dir", dir, "--format", "json", doc)
	hs := httptest.NewServer(api.New(st, 0.999).Handler())
	defer hs.Close()
	check("timeline --api-url", "timeline", "--api-url", hs.URL, doc)
	check("timeline --api-url --format json", "timeline", "--api-url", hs.URL, "--format", "json", doc)
	st.Close()
}
