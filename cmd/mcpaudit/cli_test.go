package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/store"
)

const sample = "../../testdata/sample/mixed.ndjson"

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, _ := cliRun(args...)
		if code != 0 || !regexp.MustCompile(`^mcpaudit \S+ \(commit \S+, .*go1\.\d+`).MatchString(out) {
			t.Errorf("%v: exit %d %q, want the version, commit and Go version", args, code, out)
		}
	}
}

// TestFindingsHelp: every flag of findings says what it is for.
func TestFindingsHelp(t *testing.T) {
	code, _, help := cliRun("findings", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(help, "\n")
	for i, l := range lines {
		if m := regexp.MustCompile(`^  -(\S+)`).FindStringSubmatch(l); m != nil {
			if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) == "" || strings.HasPrefix(strings.TrimSpace(lines[i+1]), "-") {
				t.Errorf("flag -%s has no description", m[1])
			}
		}
	}
	for _, want := range []string{"-api-url", "-document", "-session", "deprecated: use --api-url"} {
		if !strings.Contains(help, want) {
			t.Errorf("findings --help lacks %q", want)
		}
	}
	// -state names every state it takes, withdrawn included (fx19w: it
	// said "open, acknowledged or resolved" though withdrawn works).
	_, state, _ := strings.Cut(help, "\n  -state")
	state, _, _ = strings.Cut(state, "\n  -")
	for _, st := range audit.FindingStates {
		if !strings.Contains(state, string(st)) {
			t.Errorf("findings --help: -state%s does not name %s", state, st)
		}
	}
}

// TestQueryHelp_SaysWhat: the help of each query command says in a line
// what the command does, between its usage and its flags, as analyze's and
// serve's do; findings' names its ack, resolve and reopen commands, which a
// newcomer would otherwise find only in the command list.
func TestQueryHelp_SaysWhat(t *testing.T) {
	for _, args := range [][]string{{"findings"}, {"findings", "ack"}, {"findings", "resolve"}, {"findings", "reopen"}, {"timeline"}, {"calls"}, {"slo"}, {"status"}} {
		code, _, help := cliRun(append(args, "--help")...)
		if code != 0 {
			t.Errorf("%v --help: exit %d", args, code)
			continue
		}
		usage, rest, _ := strings.Cut(help, "\n\n")
		about, _, _ := strings.Cut(rest, "\n\n")
		if !strings.HasPrefix(usage, "usage: mcpaudit "+strings.Join(args, " ")) || about == "" || strings.HasPrefix(about, "flags:") {
			t.Errorf("%v --help says not what the command does before its flags:\n%s", args, help)
		}
	}
	_, _, help := cliRun("findings", "--help")
	if !strings.Contains(help, "findings ack|resolve|reopen") {
		t.Errorf("findings --help does not name ack, resolve and reopen:\n%s", help)
	}
}

// TestLimitHelp: every query command's --limit reads alike: the unit
// counted, the range taken and the default, as "-limit N"; and a limit out
// of its range is refused, naming the range, rather than clamped unseen.
func TestLimitHelp(t *testing.T) {
	for _, c := range []struct {
		cmd, unit, rng, def string
		out                 []string
	}{
		{"calls", "calls", "0 or more", "(default 0: every call)", []string{"-1"}},
		{"timeline", "events", fmt.Sprintf("1 to %d", store.MaxTimeline), fmt.Sprintf("(default %d)", store.DefaultTimeline), []string{"0", strconv.Itoa(store.MaxTimeline + 1)}},
		{"findings", "findings", fmt.Sprintf("1 to %d", store.MaxPage), fmt.Sprintf("(default %d)", store.DefaultPage), []string{"0", strconv.Itoa(store.MaxPage + 1)}},
	} {
		code, _, help := cliRun(c.cmd, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d", c.cmd, code)
		}
		_, entry, _ := strings.Cut(help, "\n  -limit N\n")
		entry, _, _ = strings.Cut(entry, "\n  -")
		for _, want := range []string{"print at most N " + c.unit, c.rng, c.def} {
			if !strings.Contains(entry, want) {
				t.Errorf("%s --help: -limit says %q, lacking %q", c.cmd, entry, want)
			}
		}
		for _, n := range c.out {
			args := []string{c.cmd, "--limit", n, "--data-dir", t.TempDir()}
			if c.cmd == "timeline" {
				args = append(args, "doc")
			}
			code, _, stderr := cliRun(args...)
			if code != 2 || !strings.Contains(stderr, "--limit") || (c.rng != "0 or more" && !strings.Contains(stderr, c.rng)) {
				t.Errorf("%v: exit %d %q, want 2 naming the range", args, code, stderr)
			}
		}
	}
}

// sloStore writes a data dir whose SLI over the last 30 days is 0.5: one
// durable and one unverified write.
func sloStore(t *testing.T, writes ...audit.WriteState) string {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(-time.Hour)
	var ws []audit.Write
	for i, s := range writes {
		ws = append(ws, audit.Write{CallID: "c_" + string(rune('a'+i)), Time: now, Server: "thegram", Tool: "gram_patch", State: s, StateTime: now})
	}
	if err := st.Commit(context.Background(), audit.Results{Writes: ws, Watermark: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSLOFailUnder(t *testing.T) {
	dir := sloStore(t, audit.StateDurable, audit.StateUnverified)
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"no_threshold", nil, 0, ""},
		{"overspent_below_zero", []string{"--fail-under", "0"}, 1, "is below --fail-under 0.0%"},
		{"percent", []string{"--fail-under", "25%"}, 1, "below --fail-under 25.0%"},
		{"tolerant", []string{"--fail-under", "-1000"}, 0, ""},
		{"json_too", []string{"--fail-under", "0", "--format", "json"}, 1, "below"},
		{"bad_value", []string{"--fail-under", "lots"}, 2, "want a fraction"},
		{"above_one", []string{"--fail-under", "2"}, 2, "more than the whole budget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := cliRun(append([]string{"slo", "--data-dir", dir}, tc.args...)...)
			if code != tc.code || !strings.Contains(errs, tc.says) {
				t.Errorf("exit %d %q, want %d saying %q", code, errs, tc.code, tc.says)
			}
		})
	}
	t.Run("nothing_to_judge", func(t *testing.T) {
		code, _, errs := cliRun("slo", "--data-dir", sloStore(t), "--fail-under", "0")
		if code != 2 || !strings.Contains(errs, "no write counts") {
			t.Errorf("exit %d %q", code, errs)
		}
	})
}

// TestSLOTargetHelp: slo's --target help says the default its answer
// uses: from a data dir, the built-in 0.999 (slo reads no configuration),
// which the help once called "the server's".
func TestSLOTargetHelp(t *testing.T) {
	def := NewDefaultConfig().Serve.SLOTarget
	_, _, help := cliRun("slo", "--help")
	if want := fmt.Sprintf("with --data-dir %g", def); !strings.Contains(help, want) {
		t.Errorf("slo --help lacks %q:\n%s", want, help)
	}
	code, out, errs := cliRun("slo", "--data-dir", sloStore(t, audit.StateDurable))
	if want := fmt.Sprintf("target %.4g", def); code != 0 || !strings.Contains(out, want) {
		t.Errorf("slo --data-dir: exit %d %q %s, want %q", code, out, errs, want)
	}
}

// TestSLOSaysServer: with --mcp-server the text output names the server
// it is limited to (a runbook sends the alert's server there), and without
// it names none.
func TestSLOSaysServer(t *testing.T) {
	dir := sloStore(t, audit.StateDurable, audit.StateUnverified)
	code, out, errs := cliRun("slo", "--data-dir", dir, "--mcp-server", "thegram")
	if code != 0 || !strings.HasPrefix(out, "Write durability SLO of thegram over 30d") || !strings.Contains(out, "SLI: 0.50000") {
		t.Errorf("slo --mcp-server thegram: exit %d %q %q", code, out, errs)
	}
	code, out, _ = cliRun("slo", "--data-dir", dir)
	if code != 0 || !strings.HasPrefix(out, "Write durability SLO over 30d") {
		t.Errorf("slo: exit %d %q", code, out)
	}
}

// TestFindingsLifecycleAfterFlag: "findings --api-url URL ack ID" is
// refused with where ack goes, not only as an unexpected argument.
func TestFindingsLifecycleAfterFlag(t *testing.T) {
	dir := sloStore(t, audit.StateDurable)
	code, _, errs := cliRun("findings", "--data-dir", dir, "ack", "f_00")
	if code != 2 || !strings.Contains(errs, "put ack right after findings") {
		t.Errorf("exit %d %q", code, errs)
	}
	code, _, errs = cliRun("findings", "--data-dir", dir, "extra")
	if code != 2 || !strings.Contains(errs, `unexpected argument "extra"`) || strings.Contains(errs, "right after") {
		t.Errorf("exit %d %q", code, errs)
	}
}

// TestServerAlias: --server still names the API URL, with a warning.
func TestServerAlias(t *testing.T) {
	dir := sloStore(t, audit.StateDurable)
	code, _, errs := cliRun("slo", "--data-dir", dir, "--server", "")
	if code != 0 || !strings.Contains(errs, "--server is deprecated") {
		t.Errorf("exit %d %q", code, errs)
	}
	code, _, errs = cliRun("findings", "--api-url", "http://127.0.0.1:1")
	if code != 2 || !strings.Contains(errs, "cannot reach http://127.0.0.1:1") {
		t.Errorf("--api-url is not the URL asked: exit %d %q", code, errs)
	}
}

func TestAnalyze_NoInput(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.ndjson")
	os.WriteFile(empty, nil, 0o644)
	other := filepath.Join(dir, "other.ndjson")
	os.WriteFile(other, []byte(`{"time":"2026-11-02T09:00:00Z","server":"thegram","session":"s","request":{"jsonrpc":"2.0","id":1,"method":"tools/list"},"response":{"jsonrpc":"2.0","id":1,"result":{}}}`+"\n"), 0o644)
	bad := filepath.Join(dir, "bad.ndjson")
	os.WriteFile(bad, []byte("nope\n"), 0o644)
	for _, tc := range []struct {
		file, says string
	}{
		{empty, "the input holds no call"},
		{other, "no tools/call in the input: 1 record(s) of other methods ignored"},
		{bad, "no usable call in the input: 1 rejected"},
	} {
		for _, extra := range [][]string{nil, {"--fail-on", "never"}} {
			code, _, errs := cliRun(append(append([]string{"analyze", "--progress", "never"}, extra...), tc.file)...)
			if code != 2 || !strings.Contains(errs, tc.says) {
				t.Errorf("%s %v: exit %d %q, want 2 saying %q", filepath.Base(tc.file), extra, code, errs, tc.says)
			}
		}
	}
}

func TestAnalyze_FailOnNever(t *testing.T) {
	if code, _, errs := cliRun("analyze", "--progress", "never", sample); code != 1 {
		t.Fatalf("the sample with the default --fail-on: exit %d, want 1: %s", code, errs)
	}
	if code, _, errs := cliRun("analyze", "--progress", "never", "--fail-on", "never", sample); code != 0 {
		t.Errorf("--fail-on never: exit %d, want 0: %s", code, errs)
	}
	if code, _, errs := cliRun("analyze", "--fail-on", "sometimes", sample); code != 2 || !strings.Contains(errs, "never") {
		t.Errorf("--fail-on sometimes: exit %d %q", code, errs)
	}
}

// TestAnalyze_JSONOrderAndSummary: JSON findings come in the order of the
// text table, and --summary json ends the run with one object of the
// documented shape.
func TestAnalyze_JSONOrderAndSummary(t *testing.T) {
	_, text, _ := cliRun("analyze", "--progress", "never", sample)
	code, out, errs := cliRun("analyze", "--progress", "never", "--format", "json", "--summary", "json", sample)
	if code != 1 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var findings []audit.Finding
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var f audit.Finding
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		findings = append(findings, f)
	}
	if !sort.SliceIsSorted(findings, func(i, j int) bool { return findings[i].Time.Before(findings[j].Time) }) {
		t.Error("JSON findings are not in time order")
	}
	// The text table lists the same findings in the same order.
	var rows []string
	for _, l := range strings.Split(text, "\n") {
		if regexp.MustCompile(`^\d{4}-\d\d-\d\d `).MatchString(l) {
			rows = append(rows, l)
		}
	}
	if len(rows) != len(findings) || len(rows) == 0 {
		t.Fatalf("%d table rows, %d JSON findings", len(rows), len(findings))
	}
	for i, f := range findings {
		if !strings.Contains(rows[i], string(f.Kind)) || !strings.HasPrefix(rows[i], f.Time.UTC().Format("2006-01-02 15:04:05")) {
			t.Errorf("row %d %q is not JSON finding %s at %s", i, rows[i], f.Kind, f.Time)
		}
	}
	var sum analyzeSummary
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("last stderr line is not the summary: %v\n%s", err, errs)
	}
	var total int64
	for _, n := range sum.Findings {
		total += n
	}
	if sum.SummaryVersion != 1 || sum.Calls == 0 || sum.SLI == nil || int(total) != len(findings) ||
		sum.Rejected != 5 || len(sum.RejectedExamples) != 5 || sum.Failing != len(findings) || len(sum.Writes) != len(audit.WriteStates) {
		t.Errorf("summary %+v does not match the run (%d findings)", sum, len(findings))
	}
	// The documented fields are the ones written.
	var raw map[string]any
	json.Unmarshal([]byte(lines[len(lines)-1]), &raw)
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	for k := range raw {
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("summary field %s is not documented in docs/api.md", k)
		}
	}
}

// TestAnalyze_MetricsIngest: --metrics writes the ingest series of
// docs/metrics.md for source="file", each record under one result.
func TestAnalyze_MetricsIngest(t *testing.T) {
	p := filepath.Join(t.TempDir(), "run.prom")
	code, _, errs := cliRun("analyze", "--progress", "never", "--fail-on", "never", "--metrics", p, sample)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`mcpaudit_ingest_records_total{result="accepted",source="file"} 361`,
		`mcpaudit_ingest_records_total{result="duplicate",source="file"} 3`,
		`mcpaudit_ingest_records_total{result="rejected",source="file"} 5`,
		`mcpaudit_ingest_records_total{result="ignored",source="file"} 0`,
		`mcpaudit_ingest_rejected_total{reason="invalid_json",source="file"} 1`,
		// "time": "not a time", as serve counts it.
		`mcpaudit_ingest_rejected_total{reason="bad_time",source="file"} 1`,
		`mcpaudit_ingest_rejected_total{reason="missing_field",source="file"} 3`,
		`mcpaudit_build_info{`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics file lacks %s", want)
		}
	}
}

// TestAnalyze_SummaryTooLate: the JSON summary counts the calls later than
// detect.allowed_lateness, which are not judged, as the text summary does:
// a gate reading it must see that part of its input was not looked at.
func TestAnalyze_SummaryTooLate(t *testing.T) {
	rec := func(at string, id int) string {
		return fmt.Sprintf(`{"time":%q,"server":"thegram","session":"s","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"a.gram"}}},"response":{"jsonrpc":"2.0","id":%d,"result":{}}}`, at, id, id)
	}
	p := filepath.Join(t.TempDir(), "late.ndjson")
	in := rec("2026-11-02T09:10:00Z", 1) + "\n" + rec("2026-11-02T09:00:00Z", 2) + "\n" + rec("2026-11-02T09:00:01Z", 3) + "\n"
	if err := os.WriteFile(p, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := cliRun("analyze", "--progress", "never", "--format", "json", "--summary", "json", "--fail-on", "never", p)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	var sum map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("last stderr line is not the summary: %v\n%s", err, errs)
	}
	if sum["calls"] != 1.0 || sum["too_late"] != 2.0 {
		t.Errorf("summary calls %v too_late %v, want 1 call judged and 2 too late", sum["calls"], sum["too_late"])
	}
}

// TestServerAliasGivenAName: an MCP server's name given to the deprecated
// --server (as proxy and wrap take --server, and as the alerts label the
// server) is refused with the flag meant, --mcp-server, instead of
// replacing --api-url and failing as "unsupported protocol scheme" (op21,
// following the McpAuditDoubleAppliedWrite runbook).
func TestServerAliasGivenAName(t *testing.T) {
	f := func(args ...string) {
		t.Helper()
		code, _, errs := cliRun(args...)
		if code != 2 || !strings.Contains(errs, `--server "thegram" is not a URL`) || !strings.Contains(errs, "--mcp-server thegram") || strings.Contains(errs, "protocol scheme") {
			t.Errorf("%v: exit %d %q", args, code, errs)
		}
	}
	f("findings", "--api-url", "http://127.0.0.1:1", "--kind", "double_applied_write", "--server", "thegram")
	f("calls", "--api-url", "http://127.0.0.1:1", "--server", "thegram")
	f("slo", "--server", "thegram")
	f("report", "--api-url", "http://127.0.0.1:1", "--server", "thegram")
	f("findings", "ack", "--api-url", "http://127.0.0.1:1", "--server", "thegram", "f_00", "--note", "x")
}
