package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestTimeline_OlderServerRevisions: against a serve from before the
// revisions (its call events carry none), the table prints "-" in REVISION
// and HASH on every call and nothing on writes and findings, and --format
// json passes the answer on byte for byte.
func TestTimeline_OlderServerRevisions(t *testing.T) {
	const answer = `{"document":"ops/n.gram","events":[` +
		`{"time":"2026-11-02T09:00:17.361Z","type":"call","call_id":"c_1","server":"thegram","session":"s-1","tool":"gram_patch","outcome":"no_response","code":"timeout","retry_action":"replay_same_request"},` +
		`{"time":"2026-11-02T09:00:17.361Z","type":"write","call_id":"c_1","tool":"gram_patch","key":"req-1","state":"resolved","retry_action":"replay_same_request"},` +
		`{"time":"2026-11-02T09:00:20Z","type":"call","call_id":"c_2","server":"thegram","session":"s-1","tool":"gram_read","outcome":"ok"}]}`
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(answer)) }))
	defer hs.Close()
	code, out, errs := cliRun("timeline", "--api-url", hs.URL, "ops/n.gram")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("want a title, a header and 3 events:\n%s", out)
	}
	head := lines[1]
	revAt, hashAt, whatAt := strings.Index(head, "REVISION"), strings.Index(head, "HASH"), strings.Index(head, "WHAT")
	for i, want := range []string{"-", "", "-"} {
		l := []rune(lines[2+i])
		col := func(from, to int) string { return strings.TrimSpace(string(l[from:min(to, len(l))])) }
		if rev, hash := col(revAt, hashAt), col(hashAt, whatAt); rev != want || hash != want {
			t.Errorf("event %d: REVISION %q HASH %q, want %q:\n%s", i, rev, hash, want, lines[2+i])
		}
	}
	code, out, _ = cliRun("timeline", "--api-url", hs.URL, "--format", "json", "ops/n.gram")
	if code != 0 || out != answer {
		t.Errorf("--format json: exit %d, %q; want the answer as it came", code, out)
	}
}

// TestTimeline_RevisionCellsStayInTheirColumn: a revision or hash is
// text from the sender's payload; one holding a tab or a line break (a
// hostile or broken sender) must not shift the table's columns or forge
// a line of the timeline.
func TestTimeline_RevisionCellsStayInTheirColumn(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 2, 14, 2, 0, 0, time.UTC)
	const doc = "ops/n.gram"
	c := &audit.Call{ID: "c_00000000000000000001", Time: t0, Server: "thegram", Session: "s-1", RPCID: "1", Method: "tools/call", Tool: "gram_patch",
		Arguments: []byte(`{"path":"ops/n.gram","base_revision":"22\t\t\tx","expected_hash":"h\n2026-11-02 14:02:09.000  c_forged  finding  s-9  gram_patch  double_applied_write","request_id":"r1"}`),
		Result:    []byte(`{"structuredContent":{"path":"ops/n.gram","rev":23,"hash":"2edd"}}`), Responded: true}
	recs := []audit.Record{{Call: c, Dialect: "thegram", Outcome: audit.OutcomeOK, Tool: c.Tool,
		Ops: []audit.Op{{Tool: c.Tool, Kind: audit.OpWrite, Target: doc, Status: audit.OpSucceeded}}}}
	if _, err := st.AppendCalls(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	st.Close()
	code, out, errs := cliRun("timeline", "--data-dir", dir, doc)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Errorf("one call makes %d lines, want a title, a header and the call:\n%s", len(lines), out)
	}
	if strings.Contains(out, "c_forged") && len(lines) > 3 {
		t.Errorf("a hash forged a line of the timeline:\n%s", out)
	}
	if len(lines) >= 3 {
		head, row := lines[1], []rune(lines[2])
		at := strings.Index(head, "HASH")
		if at >= len(row) || !strings.HasPrefix(strings.TrimSpace(string(row[at:])), "h") {
			t.Errorf("the HASH column does not start where its header does:\n%s", out)
		}
	}
}

// TestCell: a cell of a table keeps to one line and one column whatever
// the sender wrote, and text without a line break or tab is left alone.
func TestCell(t *testing.T) {
	for in, want := range map[string]string{
		"ops/n.gram":       "ops/n.gram",
		"a\tb":             `a\tb`,
		"h\n2026 c_forged": `h\n2026 c_forged`,
		"x\r\n":            `x\r\n`,
		"→ ü":              "→ ü",
	} {
		if got := cell(in); got != want {
			t.Errorf("cell(%q) = %q, want %q", in, got, want)
		}
	}
}
