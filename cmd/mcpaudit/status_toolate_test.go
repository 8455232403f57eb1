package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestStatus_PrintsWhatWasNotJudged: `mcpaudit status` names, for each
// source with calls too late to be judged, the span of event time they
// fall in and how to list them, so that an operator can tell which
// findings may be missing, with the command that lists them (naming the
// source, quoted for a shell when it must be, and the server when the
// source feeds one); a source with none gets no such line.
func TestStatus_PrintsWhatWasNotJudged(t *testing.T) {
	from := time.Date(2026, 12, 4, 11, 49, 42, 0, time.UTC)
	to := from.Add(4 * time.Minute)
	st := api.StatusResponse{Time: to.Add(5 * time.Minute), TooLate: 310, Partitions: []api.PartitionStatus{}, Sources: []api.SourceTotals{
		{Name: "otlp:thegram/pod-1", Servers: []string{"thegram"}, Counts: api.Counts{Calls: 900, TooLate: 310, TooLateFrom: &from, TooLateTo: &to}},
		{Name: "otlp:thegram/pod-0", Servers: []string{"thegram"}, Counts: api.Counts{Calls: 1200}},
		{Name: "calls:relay", Servers: []string{"oddlynew", "thegram"}, Counts: api.Counts{Calls: 40, TooLate: 2, TooLateFrom: &from, TooLateTo: &from}},
		{Name: "calls:agent's pod", Servers: []string{"thegram"}, Counts: api.Counts{Calls: 4, TooLate: 1, TooLateFrom: &from, TooLateTo: &from}},
		{Name: "=ls", Servers: []string{"thegram"}, Counts: api.Counts{Calls: 4, TooLate: 1, TooLateFrom: &from, TooLateTo: &from}},
	}}
	var b bytes.Buffer
	printStatus(&b, st, false)
	out := b.String()
	want := "Not judged: 310 calls of otlp:thegram/pod-1 (thegram) dated 2026-12-04T11:49:42Z to 2026-12-04T11:53:42Z came later than detect.allowed_lateness; " +
		"findings about them may be missing (listed by mcpaudit calls --source otlp:thegram/pod-1 --mcp-server thegram --since 2026-12-04T11:49:42Z --until 2026-12-04T11:53:43Z)."
	several := "Not judged: 2 calls of calls:relay (oddlynew,thegram) dated 2026-12-04T11:49:42Z to 2026-12-04T11:49:42Z came later than detect.allowed_lateness; " +
		"findings about them may be missing (listed by mcpaudit calls --source calls:relay --since 2026-12-04T11:49:42Z --until 2026-12-04T11:49:43Z)."
	quoted := "Not judged: 1 calls of calls:agent's pod (thegram) dated 2026-12-04T11:49:42Z to 2026-12-04T11:49:42Z came later than detect.allowed_lateness; " +
		`findings about them may be missing (listed by mcpaudit calls --source 'calls:agent'\''s pod' --mcp-server thegram --since 2026-12-04T11:49:42Z --until 2026-12-04T11:49:43Z).`
	zsh := "(listed by mcpaudit calls --source '=ls' --mcp-server thegram" // zsh expands a leading =
	for _, want := range []string{want, several, quoted, zsh} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks\n%s\ngot:\n%s", want, out)
		}
	}
	if strings.Count(out, "Not judged:") != 4 {
		t.Errorf("want four lines of calls not judged:\n%s", out)
	}
}

// TestStatus_PrintsClockBehind: `mcpaudit status` shows, beside AHEAD,
// the calls too late whose source's clock was behind by more than
// detect.max_clock_lag (BEHIND), per partition and per source, and says on
// the source's "Not judged" line how many of its calls came from such a
// clock, so that a slow clock is told from a backlog delivered late; a
// source with none too late that way gets no such sentence.
func TestStatus_PrintsClockBehind(t *testing.T) {
	from := time.Date(2026, 12, 5, 19, 0, 0, 0, time.UTC)
	to := from.Add(time.Minute)
	wm, lag := to.Add(2*time.Hour), 1.0
	st := api.StatusResponse{Time: wm, TooLate: 70, Partitions: []api.PartitionStatus{
		{Server: "thegram", Watermark: &wm, LagSeconds: &lag, Counts: api.Counts{Calls: 500, TooLate: 70, Behind: 60}},
	}, Sources: []api.SourceTotals{
		{Name: "otlp:thegram/slow2h", Servers: []string{"thegram"}, Counts: api.Counts{Calls: 60, TooLate: 60, Behind: 60, TooLateFrom: &from, TooLateTo: &to}},
		{Name: "otlp:thegram/backlog", Servers: []string{"thegram"}, Counts: api.Counts{Calls: 200, TooLate: 10, TooLateFrom: &from, TooLateTo: &to}},
	}}
	var b bytes.Buffer
	printStatus(&b, st, false)
	out := b.String()
	lines := strings.Split(out, "\n")
	header := func(prefix string) []string {
		for i, l := range lines {
			if strings.HasPrefix(l, prefix) && i+1 < len(lines) {
				return []string{l, lines[i+1]}
			}
		}
		t.Fatalf("no table headed %q:\n%s", prefix, out)
		return nil
	}
	// Each table's header and first row, read as columns.
	for _, tc := range []struct{ prefix, row string }{
		{"TENANT  SERVER", "thegram"},
		{"TENANT  SOURCE", "otlp:thegram/slow2h"},
	} {
		hr := header(tc.prefix)
		cols, vals := strings.Fields(strings.ReplaceAll(hr[0], "TOO LATE", "TOO_LATE")), strings.Fields(hr[1])
		i := slices.Index(cols, "BEHIND")
		if i < 0 || slices.Index(cols, "AHEAD") != i-1 {
			t.Fatalf("header %q: want BEHIND right after AHEAD", hr[0])
		}
		if !strings.Contains(hr[1], tc.row) || i >= len(vals) || vals[i] != "60" {
			t.Errorf("row %q under %q: want 60 under BEHIND", hr[1], hr[0])
		}
	}
	slow := "(listed by mcpaudit calls --source otlp:thegram/slow2h --mcp-server thegram --since 2026-12-05T19:00:00Z --until 2026-12-05T19:01:01Z). " +
		"60 of them came from a clock behind by more than detect.max_clock_lag"
	if !strings.Contains(out, slow) {
		t.Errorf("status output lacks\n%s\ngot:\n%s", slow, out)
	}
	if strings.Count(out, "came from a clock behind") != 1 {
		t.Errorf("want the slow clock told on the slow source's line alone:\n%s", out)
	}
}

// TestStatus_PrintsOverflow: `mcpaudit status` says when a partition had
// no room for new senders (detect.max_sources, none quiet) and marks its
// overflow source; the calls of it that came too late are listed by
// server and time, not by the overflow source's name, which no stored
// call carries (each keeps its own sender's).
func TestStatus_PrintsOverflow(t *testing.T) {
	from := time.Date(2026, 12, 4, 11, 49, 42, 0, time.UTC)
	wm, lag := from, 1.0
	st := api.StatusResponse{Time: from.Add(time.Minute), TooLate: 3, Partitions: []api.PartitionStatus{
		{Server: "thegram", Tenant: "acme", Watermark: &wm, LagSeconds: &lag, OverflowCalls: 28000, SourcesDisplaced: 1000, Sources: []api.SourceStatus{
			{Name: "calls:poster-1", LastEvent: from},
			{Name: "mcpaudit/overflow", LastEvent: from, Overflow: true},
		}},
		{Server: "oddlynew", Watermark: &wm, LagSeconds: &lag},
	}, Sources: []api.SourceTotals{
		{Name: "mcpaudit/overflow", Tenant: "acme", Servers: []string{"thegram"}, Counts: api.Counts{Calls: 28000, TooLate: 3, TooLateFrom: &from, TooLateTo: &from}},
	}}
	var b bytes.Buffer
	printStatus(&b, st, false)
	out := b.String()
	for _, want := range []string{
		"Sources overflow: thegram (tenant acme) kept detect.max_sources senders, none quiet: 28000 calls of new senders were judged under its overflow source (mcpaudit/overflow), whose clock follows the latest of them; 1000 quiet senders made room for new ones.",
		"(listed by mcpaudit calls --mcp-server thegram --since 2026-12-04T11:49:42Z --until 2026-12-04T11:49:43Z)",
		"active, overflow",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks\n%s\ngot:\n%s", want, out)
		}
	}
	if strings.Count(out, "Sources overflow:") != 1 || strings.Contains(out, "--source mcpaudit/overflow") {
		t.Errorf("want one overflow line, and no command listing by the overflow source's name:\n%s", out)
	}
}

// TestStatus_OverflowTooLateSenders: the overflow source's calls not
// judged are stored under their senders' names, which the status gives
// (the latest few): the line names them, and the command lists by the
// sender when one alone sent them, else by server and time.
func TestStatus_OverflowTooLateSenders(t *testing.T) {
	from := time.Date(2026, 12, 4, 11, 49, 42, 0, time.UTC)
	f := func(servers, senders []string, want string) {
		t.Helper()
		st := api.StatusResponse{Time: from.Add(time.Minute), TooLate: 3, Sources: []api.SourceTotals{
			{Name: "mcpaudit/overflow", Tenant: "acme", Servers: servers, TooLateSenders: senders,
				Counts: api.Counts{Calls: 28000, TooLate: 3, TooLateFrom: &from, TooLateTo: &from}},
		}}
		var b bytes.Buffer
		printStatus(&b, st, false)
		if !strings.Contains(b.String(), want) {
			t.Errorf("status output lacks\n%s\ngot:\n%s", want, b.String())
		}
	}
	f([]string{"thegram"}, []string{"otlp:thegram/pod-7/node 2"},
		"Not judged: 3 calls of mcpaudit/overflow, latest senders 'otlp:thegram/pod-7/node 2' (thegram) dated 2026-12-04T11:49:42Z to 2026-12-04T11:49:42Z came later than detect.allowed_lateness; findings about them may be missing (listed by mcpaudit calls --source 'otlp:thegram/pod-7/node 2' --mcp-server thegram --since 2026-12-04T11:49:42Z --until 2026-12-04T11:49:43Z).")
	f([]string{"thegram", "oddlynew"}, []string{"otlp:thegram/pod-7/node-2"},
		"(listed by mcpaudit calls --source otlp:thegram/pod-7/node-2 --since")
	f([]string{"thegram"}, []string{"calls:poster-9", "calls:poster-3"},
		"3 calls of mcpaudit/overflow, latest senders calls:poster-9 calls:poster-3 (thegram) dated 2026-12-04T11:49:42Z to 2026-12-04T11:49:42Z came later than detect.allowed_lateness; findings about them may be missing (listed by mcpaudit calls --mcp-server thegram --since")
	f([]string{"thegram", "oddlynew"}, []string{"calls:poster-9", "calls:poster-3"},
		"(listed by mcpaudit calls --mcp-server SERVER --since")
	f([]string{"thegram"}, nil,
		"3 calls of mcpaudit/overflow (thegram) dated")
}
