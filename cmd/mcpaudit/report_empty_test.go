package main

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/clickhouse"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/report"
)

// TestReport_EmptyWindowSaysWhereTheWritesAre: a report whose window holds
// no write, over a store whose writes are from the past (a capture of
// October posted today), says where the stored writes are, first and last,
// and the --until and --window that cover them, in md and html, locally and
// from /api/v1/report, and on standard error; the window it names, given
// back, reports every write. Before op46 the report said n/a and zeros and
// nothing of where the data was. A store with no write says so.
func TestReport_EmptyWindowSaysWhereTheWritesAre(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(context.Background(), pastWrites()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(report.Handler(st, api.New(st, 0.999)))
	defer hs.Close()

	const firstSaid, lastSaid = "2026-10-01 09:15:02 UTC", "2026-10-03 17:42:07 UTC"
	const hint = `--until "2026-10-03 17:43" --window 3d`
	for _, format := range []string{"md", "html"} {
		code, out, errs := cliRun("report", "--data-dir", dir, "--mcp-server", "thegram", "--format", format)
		out = html.UnescapeString(out)
		if code != 0 || !strings.Contains(out, "No write is dated in this window") || !strings.Contains(out, firstSaid) ||
			!strings.Contains(out, lastSaid) || !strings.Contains(out, hint) {
			t.Errorf("report --format %s over an empty window: exit %d; want where the writes are (%s to %s) and %s:\n%s", format, code, firstSaid, lastSaid, hint, out)
		}
		if format == "md" && (!strings.Contains(errs, firstSaid) || !strings.Contains(errs, hint)) {
			t.Errorf("report's standard error does not say where the writes are: %q", errs)
		}
		resp, err := http.Get(hs.URL + "?server=thegram&format=" + format)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := html.UnescapeString(string(b)); resp.StatusCode != 200 || !strings.Contains(got, firstSaid) || !strings.Contains(got, hint) {
			t.Errorf("/api/v1/report?format=%s: %d, want where the writes are and %s:\n%s", format, resp.StatusCode, hint, got)
		}
	}
	code, out, _ := cliRun("report", "--data-dir", dir, "--mcp-server", "thegram", "--format", "json")
	if code != 0 || !regexp.MustCompile(`"stored_writes": \{\s*"first": "2026-10-01T09:15:02Z",\s*"last": "2026-10-03T17:42:07.25Z",\s*"until": "2026-10-03 17:43",\s*"window": "3d"`).MatchString(out) {
		t.Errorf("report --format json: exit %d, want stored_writes:\n%s", code, out)
	}
	// The window it names holds every write of the server.
	code, out, errs := cliRun("report", "--data-dir", dir, "--mcp-server", "thegram", "--format", "md", "--until", "2026-10-03 17:43", "--window", "3d")
	if code != 0 || strings.Contains(out, "No write is dated") || !strings.Contains(out, "| bad events | 1 of 3 counted writes |") || errs != "" {
		t.Errorf("report over the window it named: exit %d, stderr %q; want 1 bad of 3 counted writes:\n%s", code, errs, out)
	}
	st.Close()

	// No write stored at all: said, with no window to suggest.
	empty := t.TempDir()
	st2, err := sqlite.Open(filepath.Join(empty, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	st2.Close()
	code, out, _ = cliRun("report", "--data-dir", empty, "--format", "md")
	if code != 0 || !strings.Contains(out, "No write is dated in this window, and none is stored.") || strings.Contains(out, "--until") {
		t.Errorf("report over an empty store: exit %d; want it to say no write is stored:\n%s", code, out)
	}
}

// pastWrites are thegram's writes of 2026-10-01 09:15:02 to 2026-10-03
// 17:42:07.25 UTC, one of three unverified, and a later oddlynew write.
func pastWrites() audit.Results {
	first := time.Date(2026, 10, 1, 9, 15, 2, 0, time.UTC)
	last := time.Date(2026, 10, 3, 17, 42, 7, 250e6, time.UTC)
	var ws []audit.Write
	for i, at := range []time.Time{first, first.Add(26 * time.Hour), last} {
		state := audit.StateDurable
		if i == 1 {
			state = audit.StateUnverified
		}
		ws = append(ws, audit.Write{CallID: fmt.Sprintf("c_%020d", i+1), Time: at, Server: "thegram", Tool: "gram_patch", State: state, StateTime: at})
	}
	// Another server's write, later: the span is the report's server's.
	ws = append(ws, audit.Write{CallID: "c_00000000000000000009", Time: last.Add(48 * time.Hour), Server: "oddlynew", Tool: "run", State: audit.StateDurable, StateTime: last})
	return audit.Results{Writes: ws, Watermark: last.Add(48 * time.Hour)}
}

// TestReport_EmptyWindowClickHouse: the same search over ClickHouse finds
// the same first and last write and the same window to ask for.
func TestReport_EmptyWindowClickHouse(t *testing.T) {
	dsn := clickhouseDSN(t)
	o := NewDefaultConfig().Serve.ClickHouse
	o.DSN, o.Database, o.Spool.Dir = dsn, fmt.Sprintf("mcpaudit_op46_%d", time.Now().UnixNano()), t.TempDir()
	st, err := clickhouse.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(context.Background(), pastWrites()); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(t.TempDir(), "mcpaudit.yaml")
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf("serve:\n  store: clickhouse\n  clickhouse: {dsn: %q, database: %q}\n", dsn, o.Database)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cliRun("report", "--config", cfgFile, "--mcp-server", "thegram", "--format", "json")
	if code != 0 || !regexp.MustCompile(`"stored_writes": \{\s*"first": "2026-10-01T09:15:02Z",\s*"last": "2026-10-03T17:42:07.25Z",\s*"until": "2026-10-03 17:43",\s*"window": "3d"`).MatchString(out) {
		t.Errorf("report --store clickhouse: exit %d, stderr %q, want stored_writes as the embedded store's:\n%s", code, errs, out)
	}
}
