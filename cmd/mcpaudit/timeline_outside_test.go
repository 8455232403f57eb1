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

// TestTimeline_FindingsOutsideTheRange: "what happened to this document at
// 14:02?" A double-applied write's finding is dated by its first evidence
// call (the patch that timed out at 14:01:41); the second application, at
// 14:02:10, is evidence too. mcpaudit timeline --since 14:02 shows that
// call and its write state; it names the finding the call is evidence of on
// standard error and counts the other findings of the document that fall
// outside the range, as the page's timeline does (nop48: the CLI showed
// "state double_applied" and nothing of the finding). Without a range it
// says nothing more. A real SQLite store, read directly and through the API.
func TestTimeline_FindingsOutsideTheRange(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const doc = "ops/notes-1d0459.gram"
	day := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	at := func(hms string) time.Time {
		d, err := time.ParseDuration(hms)
		if err != nil {
			t.Fatal(err)
		}
		return day.Add(d)
	}
	call := func(id string, when time.Time, status audit.OpStatus) audit.Record {
		c := &audit.Call{ID: id, Time: when, Server: "thegram", Session: "s-d7448f42d1", RPCID: "1", Method: "tools/call", Tool: "gram_patch",
			Arguments: []byte(`{"path":"` + doc + `","base_revision":15,"request_id":"req-` + id + `"}`)}
		outcome := audit.OutcomeOK
		if status == audit.OpUncertain {
			outcome = audit.OutcomeNoResponse
		}
		return audit.Record{Call: c, Dialect: "thegram", Outcome: outcome, Tool: c.Tool,
			Ops: []audit.Op{{Tool: c.Tool, Kind: audit.OpWrite, Target: doc, Status: status}}}
	}
	const early, first, second = "c_00000000000000000001", "c_00000000000000000002", "c_00000000000000000003"
	recs := []audit.Record{
		call(early, at("13h40m"), audit.OpUncertain),
		call(first, at("14h1m41.975s"), audit.OpUncertain),
		call(second, at("14h2m10.562s"), audit.OpSucceeded),
	}
	if _, err := st.AppendCalls(ctx, recs); err != nil {
		t.Fatal(err)
	}
	double := audit.Finding{Kind: audit.KindDoubleAppliedWrite, Severity: audit.KindDoubleAppliedWrite.Severity(), Server: "thegram",
		Document: doc, Key: "req-" + second, Session: "s-d7448f42d1", Time: recs[1].Call.Time, Calls: []string{first, second}, Summary: "applied twice"}
	unverified := audit.Finding{Kind: audit.KindUnverifiedWrite, Severity: audit.KindUnverifiedWrite.Severity(), Server: "thegram",
		Document: doc, Key: "req-" + early, Session: "s-d7448f42d1", Time: recs[0].Call.Time, Calls: []string{early}, Summary: "no proof"}
	if err := st.Commit(ctx, audit.Results{Findings: []audit.Finding{double, unverified}}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(api.New(st, 0.999).Handler())
	defer hs.Close()
	defer st.Close()
	for _, where := range [][]string{{"--data-dir", dir}, {"--api-url", hs.URL}} {
		for _, format := range []string{"text", "json"} {
			args := append([]string{"timeline"}, where...)
			args = append(args, "--format", format, "--since", "2026-12-06 14:02", "--until", "2026-12-06 14:03", doc)
			code, out, errs := cliRun(args...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, errs)
			}
			if !strings.Contains(out, second) || strings.Contains(out, first) {
				t.Fatalf("%v: want the call of 14:02:10 alone in the range:\n%s", args, out)
			}
			want := "call " + second + " in the range is evidence of finding " + double.ID() + " (double_applied_write, open), dated 2026-12-06 14:01:41.975 UTC"
			if !strings.Contains(errs, want) {
				t.Errorf("%v: standard error does not name the finding the call shown is evidence of (%q):\n%s", args, want, errs)
			}
			if !strings.Contains(errs, "1 more finding on this document falls outside the range") {
				t.Errorf("%v: standard error does not count the other finding outside the range:\n%s", args, errs)
			}
			if strings.Contains(errs, unverified.ID()) {
				t.Errorf("%v: names a finding no call shown is evidence of:\n%s", args, errs)
			}
		}
		// A truncated answer: the first call alone of a range that holds
		// its finding too; the finding is in the range, past the events
		// returned, not "outside the range". The note counts one event
		// (it said "1 events").
		args := append(append([]string{"timeline"}, where...), "--since", "2026-12-06 14:00", "--limit", "1", doc)
		if code, out, errs := cliRun(args...); code != 0 || !strings.Contains(out, first) || strings.Contains(errs, "evidence of finding") || !strings.Contains(errs, "stopped after 1 event (--limit 1)") {
			t.Errorf("%v: exit %d; want the first call, the truncation note and no finding called outside the range:\n%s\nstderr: %s", args, code, out, errs)
		}
		args = append(append([]string{"timeline"}, where...), doc)
		code, out, errs := cliRun(args...)
		if code != 0 || !strings.Contains(out, double.ID()) || !strings.Contains(out, unverified.ID()) || errs != "" {
			t.Errorf("%v: exit %d; want both findings in the table and nothing on standard error:\n%s\nstderr: %s", args, code, out, errs)
		}
	}
}

// TestFindings_EmptyRangeSaysHowFindingsAreDated: mcpaudit findings with
// --since and --until that lists nothing says on standard error that a
// finding is dated by its first evidence call and which commands show the
// range's calls (nop48: 14:02 to 14:03 printed an empty table beside the
// second application of a double-applied write dated 14:01:41); a range
// with findings, or no range, says nothing of it. A real SQLite store.
func TestFindings_EmptyRangeSaysHowFindingsAreDated(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := time.Date(2026, 12, 6, 14, 1, 41, 975e6, time.UTC)
	f := audit.Finding{Kind: audit.KindDoubleAppliedWrite, Severity: audit.KindDoubleAppliedWrite.Severity(), Server: "thegram",
		Document: "ops/n.gram", Key: "req-2", Time: at, Calls: []string{"c_00000000000000000001", "c_00000000000000000002"}, Summary: "applied twice"}
	if err := st.Commit(ctx, audit.Results{Findings: []audit.Finding{f}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	const note = "a finding is dated by its first evidence call"
	for _, tc := range []struct {
		args []string
		note bool
	}{
		{[]string{"--since", "2026-12-06 14:02", "--until", "2026-12-06 14:03"}, true},
		{[]string{"--since", "2026-12-06 14:02"}, true},
		{[]string{"--since", "2026-12-06 14:01", "--until", "2026-12-06 14:03"}, false},
		{[]string{"--kind", "unsafe_retry"}, false},
	} {
		code, out, errs := cliRun(append([]string{"findings", "--data-dir", dir}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errs)
		}
		if strings.Contains(errs, note) != tc.note {
			t.Errorf("%v: standard error says how findings are dated: %v, want %v\nstdout: %s\nstderr: %s", tc.args, !tc.note, tc.note, out, errs)
		}
	}
}
