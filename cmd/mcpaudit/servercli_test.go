package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// twoServerStore is a real embedded store where servers thegram-otel and
// thegram-otelg each hold a document of one path and the same exchange (a
// read, then a patch and its write), with a finding each: two exporters
// replaying one capture, as op23's operator had them (a call's id is its
// server's).
func twoServerStore(t *testing.T) (*sqlite.Store, string, time.Time) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	t0 := time.Date(2026, 12, 6, 17, 54, 31, 0, time.UTC)
	const doc = "research/log-153acd.gram"
	for i, server := range []string{"thegram-otel", "thegram-otelg"} {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		id := func(n int) string { return fmt.Sprintf("c_%020d", 10*i+n) }
		read := &audit.Call{ID: id(1), Time: at, Server: server, Session: "s-39c9", RPCID: "1", Method: "tools/call",
			Tool: "gram_read", Arguments: []byte(`{"path":"` + doc + `"}`), Responded: true}
		patch := &audit.Call{ID: id(2), Time: at.Add(2 * time.Second), Server: server, Session: "s-39c9", RPCID: "2", Method: "tools/call",
			Tool: "gram_patch", Arguments: []byte(`{"path":"` + doc + `"}`), Responded: true}
		recs := []audit.Record{
			{Call: read, Outcome: audit.OutcomeOK, Tool: read.Tool, Ops: []audit.Op{{Tool: read.Tool, Kind: audit.OpRead, Target: doc, Status: audit.OpSucceeded}}},
			{Call: patch, Outcome: audit.OutcomeOK, Tool: patch.Tool, Ops: []audit.Op{{Tool: patch.Tool, Kind: audit.OpWrite, Target: doc, Status: audit.OpSucceeded}}},
		}
		if _, err := st.AppendCalls(context.Background(), recs); err != nil {
			t.Fatal(err)
		}
		f := audit.Finding{Kind: audit.KindDoubleAppliedWrite, Severity: audit.SeverityCritical, Server: server,
			Document: doc, Session: "s-39c9", Time: patch.Time, Calls: []string{patch.ID}, Summary: "twice on " + doc}
		w := audit.Write{CallID: patch.ID, Time: patch.Time, Server: server, Session: patch.Session, Tool: patch.Tool, Document: doc,
			Key: "req-1", State: audit.StateDoubleApplied, StateTime: patch.Time}
		if err := st.Commit(context.Background(), audit.Results{Writes: []audit.Write{w}, Findings: []audit.Finding{f}}); err != nil {
			t.Fatal(err)
		}
	}
	return st, doc, t0
}

// TestCLI_TimelineServerColumn: the timeline of a document two servers
// hold begins each row with its SERVER and says so in its title; with
// --mcp-server it shows that server's rows alone, and names it. Its title
// counts the rows it prints, a time serve was down among them (op23's D2:
// 2 findings and 8 calls that read as duplicates; D6: "(7 events)" above
// 10 rows).
func TestCLI_TimelineServerColumn(t *testing.T) {
	st, doc, t0 := twoServerStore(t)
	q := api.New(st, 0.999)
	q.Downtimes = func() []audit.Downtime {
		return []audit.Downtime{{From: t0.Add(time.Second), To: t0.Add(1500 * time.Millisecond), End: audit.EndCrash}}
	}
	hs := httptest.NewServer(q.Handler())
	defer hs.Close()
	cli := func(args ...string) (string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"timeline", "--api-url", hs.URL}, args...), nil, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		return out.String(), errb.String()
	}

	out, errs := cli(doc)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	const title = "Timeline of research/log-153acd.gram on 2 servers: thegram-otel, thegram-otelg (9 rows: 8 events and 1 time serve was down)"
	if lines[0] != title {
		t.Errorf("title %q, want %q", lines[0], title)
	}
	if rows := len(lines) - 2; rows != 9 {
		t.Errorf("%d rows under the header, want the 9 the title counts:\n%s", rows, out)
	}
	if head := strings.Fields(lines[1]); head[0] != "SERVER" {
		t.Errorf("the header begins %q, want SERVER:\n%s", head[0], out)
	}
	per := map[string]int{}
	for _, l := range lines[2:] {
		per[strings.Fields(l)[0]]++
	}
	if per["thegram-otel"] != 4 || per["thegram-otelg"] != 4 || per["-"] != 1 {
		t.Errorf("rows by their first cell %v, want 4 of each server (2 calls, a write, a finding) and the downtime's -:\n%s", per, out)
	}
	if !strings.Contains(errs, `2 servers hold a document named "research/log-153acd.gram"`) || !strings.Contains(errs, "--mcp-server") {
		t.Errorf("stderr %q does not say that two servers hold the name, and how to keep one", errs)
	}

	out, errs = cli("--mcp-server", "thegram-otelg", doc)
	lines = strings.Split(strings.TrimRight(out, "\n"), "\n")
	if want := "Timeline of research/log-153acd.gram on thegram-otelg (5 rows: 4 events and 1 time serve was down)"; lines[0] != want {
		t.Errorf("--mcp-server: title %q, want %q", lines[0], want)
	}
	if head := strings.Fields(lines[1]); head[0] != "TIME" || len(lines) != 7 || errs != "" {
		t.Errorf("--mcp-server: header begins %q, %d rows, stderr %q; want TIME, 5 rows, nothing:\n%s", head[0], len(lines)-2, errs, out)
	}
}
