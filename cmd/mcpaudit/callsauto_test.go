package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/report"
)

// startLogged is startTest with serve's log (INFO and up) kept in the
// returned buffer; it fails t when serve does not start.
func startLogged(t *testing.T, cfg Config) (*server, *lockedBuffer) {
	t.Helper()
	s, buf, err := startLoggedErr(cfg)
	if err != nil {
		t.Fatalf("serve: %v\n%s", err, buf.String())
	}
	t.Cleanup(func() { stopServe(t, s) })
	return s, buf
}

// startLoggedErr starts serve on cfg, its log in the returned buffer.
func startLoggedErr(cfg Config) (*server, *lockedBuffer, error) {
	buf := &lockedBuffer{}
	s, err := startServer(context.Background(), cfg, slog.New(slog.NewTextHandler(buf, nil)))
	return s, buf, err
}

// stopServe shuts s down (a second shutdown does nothing).
func stopServe(t *testing.T, s *server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.shutdown(ctx); err != nil {
		t.Error(err)
	}
}

// autoConfig is testConfig with serve.sqlite.calls set to calls.
func autoConfig(t *testing.T, dir, calls string) Config {
	cfg := testConfig(t, dir)
	cfg.Serve.SQLite.Calls = calls
	return cfg
}

// choseCalls fails t unless serve's log says calls: auto chose where, for
// a reason holding why.
func choseCalls(t *testing.T, log *lockedBuffer, where, why string) {
	t.Helper()
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "level=INFO") && strings.Contains(l, "serve.sqlite.calls: auto") {
			if !strings.Contains(l, "calls="+where) || !strings.Contains(l, why) {
				t.Fatalf("serve chose: %s\nwant calls=%s for %q", l, where, why)
			}
			return
		}
	}
	t.Fatalf("serve logged no choice of calls: auto:\n%s", log.String())
}

// readersSee checks that every --data-dir reader of dir (export, calls,
// findings, timeline, report, verify) reads the n calls and the findings
// of the merged capture, wherever the data dir keeps them.
func readersSee(t *testing.T, dir string, n int, findings []audit.Finding) {
	t.Helper()
	lines := func(s string) int { return strings.Count(s, "\n") }
	if code, out, errs := cliRun("export", "--data-dir", dir); code != 0 || lines(out) != n {
		t.Errorf("export --data-dir: exit %d, %d calls of %d: %s", code, lines(out), n, errs)
	}
	if code, out, errs := cliRun("calls", "--data-dir", dir, "--format", "json"); code != 0 || lines(out) != n {
		t.Errorf("calls --data-dir: exit %d, %d calls of %d: %s", code, lines(out), n, errs)
	}
	code, out, errs := cliRun("findings", "--data-dir", dir, "--format", "json")
	var page struct {
		Findings []json.RawMessage `json:"findings"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Findings) != len(findings) {
		t.Errorf("findings --data-dir: exit %d, %d findings of %d: %s%s", code, len(page.Findings), len(findings), out, errs)
	}
	doc := ""
	for _, f := range findings {
		if doc = f.Document; doc != "" {
			break
		}
	}
	code, out, errs = cliRun("timeline", "--data-dir", dir, "--format", "json", doc)
	var tl struct {
		Events []struct {
			Type string `json:"type"`
		} `json:"events"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &tl) != nil || len(tl.Events) == 0 || tl.Events[0].Type != "call" {
		t.Errorf("timeline --data-dir %s: exit %d, no call: %s%s", doc, code, out, errs)
	}
	code, out, errs = cliRun("report", "--data-dir", dir, "--window", "2d", "--until", "2026-11-03T00:00:00Z", "--format", "json")
	var r report.Report
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Failures == 0 || r.FindingsTotal == 0 {
		t.Errorf("report --data-dir: exit %d, %d failed calls, %d findings: %s", code, r.Failures, r.FindingsTotal, errs)
	}
	if code, out, errs := cliRun("verify", "--data-dir", dir); code != 0 {
		t.Errorf("verify --data-dir: exit %d: %s%s", code, out, errs)
	}
}

// TestCallsAuto_ServeAndReaders: with serve.sqlite.calls: auto serve keeps
// the calls of a new data dir in call logs and those of a data dir whose
// calls table holds calls in the table, saying so with the reason; the
// --data-dir readers read every call either way, beside serve; backups
// restored across modes are opened where their calls are; a data dir
// whose table and logs both hold calls is refused by serve and by the
// readers, naming both.
func TestCallsAuto_ServeAndReaders(t *testing.T) {
	body := ndjson(mergedCapture(t))

	// A new data dir: the call logs.
	logDir := t.TempDir()
	cfg := autoConfig(t, logDir, sqlite.CallsAuto)
	want := analyzeFindings(t, cfg, body)
	s, log := startLogged(t, cfg)
	choseCalls(t, log, sqlite.CallsLog, "no call is stored yet")
	resp := postCalls(t, s, body, false)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("post: %s", resp.Status)
	}
	waitFindings(t, s, want)
	calls := apiCalls(t, s)
	if n, _, err := sqlite.Count(context.Background(), filepath.Join(logDir, storeFile)); err != nil || n != 0 || !calllogs.InUse(logDir) {
		t.Fatalf("new data dir with calls: auto: %d calls in the table (%v), logs in use %v", n, err, calllogs.InUse(logDir))
	}
	readersSee(t, logDir, len(calls), want)
	logCopy := filepath.Join(t.TempDir(), "log.db")
	if code, out, errs := cliRun("backup", "--data-dir", logDir, "--out", logCopy); code != 0 || !strings.Contains(out, callsCopy(logCopy)) {
		t.Fatalf("backup: exit %d: %s%s", code, out, errs)
	} else if total := fmt.Sprintf("backup %s holds %d calls (%d in the call logs, 0 in the store's calls table)", logCopy, len(calls), len(calls)); !strings.Contains(out, total) {
		// Its line for the store said "0 calls" alone, which read as an
		// empty backup (adv52).
		t.Errorf("backup of a data dir in call logs does not say %q:\n%s", total, out)
	}
	stopServe(t, s)

	// A data dir of calls: sqlite (an upgrade): its calls table.
	tableDir := t.TempDir()
	s, _ = serveCapture(t, autoConfig(t, tableDir, sqlite.CallsSQLite), body, want)
	stopServe(t, s)
	s, log = startLogged(t, autoConfig(t, tableDir, sqlite.CallsAuto))
	choseCalls(t, log, sqlite.CallsSQLite, "the calls table holds")
	if _, err := os.Stat(calllogs.Dir(tableDir)); err == nil {
		t.Errorf("calls: auto choosing the calls table left %s", calllogs.Dir(tableDir))
	}
	readersSee(t, tableDir, len(calls), want)
	tableCopy := filepath.Join(t.TempDir(), "table.db")
	if code, out, errs := cliRun("backup", "--data-dir", tableDir, "--out", tableCopy); code != 0 || strings.Contains(out, callsCopy(tableCopy)) {
		t.Fatalf("backup: exit %d: %s%s", code, out, errs)
	}
	stopServe(t, s)

	// Across modes: the table's backup into the logs' data dir, and back.
	for _, c := range []struct {
		from, into, where, why string
	}{
		{tableCopy, logDir, sqlite.CallsSQLite, "the calls table holds"},
		{logCopy, tableDir, sqlite.CallsLog, "the call logs hold calls"},
	} {
		if code, out, errs := cliRun("restore", "--data-dir", c.into, "--from", c.from); code != 0 {
			t.Fatalf("restore %s: exit %d: %s%s", c.from, code, out, errs)
		}
		s, log := startLogged(t, autoConfig(t, c.into, sqlite.CallsAuto))
		choseCalls(t, log, c.where, c.why)
		if got := apiCalls(t, s); len(got) != len(calls) {
			t.Errorf("restored %s: %d calls, want %d", c.from, len(got), len(calls))
		}
		stopServe(t, s)
		readersSee(t, c.into, len(calls), want)
	}

	// Both: the logs' backup copied beside a calls table.
	both := t.TempDir()
	if code, out, errs := cliRun("restore", "--data-dir", both, "--from", tableCopy); code != 0 {
		t.Fatalf("restore: exit %d: %s%s", code, out, errs)
	}
	if out, err := exec.Command("cp", "-a", callsCopy(logCopy), calllogs.Dir(both)).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	s, log, err := startLoggedErr(autoConfig(t, both, sqlite.CallsAuto))
	if err == nil {
		stopServe(t, s)
		t.Fatalf("serve with calls: auto opened a data dir whose table and logs both hold calls:\n%s", log.String())
	}
	if !strings.Contains(err.Error(), "both the calls table and the call logs hold calls") || !strings.Contains(err.Error(), "migrate-calls") {
		t.Errorf("serve on both: %v", err)
	}
	if code, _, errs := cliRun("export", "--data-dir", both); code == 0 || !strings.Contains(errs, "both the calls table and the call logs hold calls") {
		t.Errorf("export --data-dir on both: exit %d: %s", code, errs)
	}
	// migrate-calls moves the table's calls into the logs, which hold
	// them all already: none twice.
	if code, out, errs := cliRun("migrate-calls", "--data-dir", both); code != 0 || !strings.Contains(out, "moved 0 calls") || !strings.Contains(out, fmt.Sprintf("%d more were in the logs already", len(calls))) {
		t.Fatalf("migrate-calls on both: exit %d: %s%s", code, out, errs)
	}
	s, log = startLogged(t, autoConfig(t, both, sqlite.CallsAuto))
	choseCalls(t, log, sqlite.CallsLog, "the call logs hold calls")
	if got := apiCalls(t, s); len(got) != len(calls) {
		t.Errorf("after migrate-calls on both: %d calls, want %d", len(got), len(calls))
	}
}

// TestOpenStore_CallsEmptyIsAuto: serve.sqlite.calls given empty (`calls:`
// with no value, or "" from a template's unset variable) takes the
// default, auto, as every other zero key of serve.sqlite does: a new data
// dir keeps its calls in call logs and serve says where. Until adv52 an
// empty value kept them in the calls table, the default before stop 52,
// with no word in the log (config validate said the file was valid).
func TestOpenStore_CallsEmptyIsAuto(t *testing.T) {
	cfg := NewDefaultConfig()
	cfg.Serve.DataDir = t.TempDir()
	cfg.Serve.SQLite.Calls = ""
	var buf bytes.Buffer
	st, err := openStore(context.Background(), cfg, slog.New(slog.NewJSONHandler(&buf, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if where, why := st.(*sqlite.Store).CallsKept(); where != sqlite.CallsLog {
		t.Errorf("calls: \"\" on a new data dir kept calls in %q (%s), want %q (auto's choice)", where, why, sqlite.CallsLog)
	}
	if !strings.Contains(buf.String(), `"calls":"log"`) || !strings.Contains(buf.String(), "serve.sqlite.calls: auto") {
		t.Errorf("serve's log does not say the calls are kept in call logs under auto:\n%s", buf.String())
	}
}
