package report_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/report"
)

var day0 = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)

// TestBuild stores three days of writes with known states and checks the
// report's arithmetic: counts, SLI and budget, causes, days, the worst day
// and the burn-down, which ends where the budget ends.
func TestBuild(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	var ws []audit.Write
	n := 0
	add := func(day, count int, state audit.WriteState, reason audit.Reason, tool string) {
		for range count {
			n++
			ws = append(ws, audit.Write{CallID: fmt.Sprintf("c_%020x", n), Time: day0.Add(time.Duration(day)*24*time.Hour + time.Duration(n)*time.Minute),
				Server: "thegram", Tool: tool, Document: fmt.Sprintf("doc-%d.gram", n%3), State: state, Reason: reason})
		}
	}
	add(0, 100, audit.StateDurable, "", "gram_patch")
	add(1, 95, audit.StateDurable, "", "gram_patch")
	add(1, 3, audit.StateUnverified, audit.ReasonCommitUnknown, "gram_patch")
	add(1, 2, audit.StateDoubleApplied, "", "gram_patch")
	add(2, 99, audit.StateResolved, "", "gram_create")
	add(2, 1, audit.StateUnverified, audit.ReasonNoResponse, "gram_create")
	add(2, 7, audit.StateRejected, "", "gram_create")
	if err := st.Commit(ctx, audit.Results{Writes: ws}); err != nil {
		t.Fatal(err)
	}
	r, err := report.Build(ctx, st, report.Query{Window: 30 * 24 * time.Hour, WindowName: "30d", Until: day0.Add(3 * 24 * time.Hour), Target: 0.99})
	if err != nil {
		t.Fatal(err)
	}
	if r.BadEvents != 6 || report.Counted(r.Counts) != 300 || math.Abs(*r.SLI-294.0/300) > 1e-12 {
		t.Fatalf("bad %d, counted %d, SLI %v; want 6, 300, 0.98", r.BadEvents, report.Counted(r.Counts), *r.SLI)
	}
	if math.Abs(*r.ErrorBudgetRemaining-(-1)) > 1e-9 || math.Abs(*r.ErrorBudgetSpent-2) > 1e-9 {
		t.Errorf("budget remaining %v, spent %v; want -1 and 2 (twice the 1%% budget)", *r.ErrorBudgetRemaining, *r.ErrorBudgetSpent)
	}
	causes := fmt.Sprint(r.ByCause)
	if causes != "[{unverified: commit_unknown  3} {double_applied  2} {unverified: no_response  1}]" {
		t.Errorf("by cause %s", causes)
	}
	if fmt.Sprint(r.ByTool) != "[{gram_patch  5} {gram_create  1}]" {
		t.Errorf("by tool %v", r.ByTool)
	}
	if len(r.Days) != 3 || r.Days[1].Bad != 5 || r.Days[2].Bad != 1 || r.Days[0].Bad != 0 {
		t.Fatalf("days %+v", r.Days)
	}
	if len(r.WorstDays) != 2 || !r.WorstDays[0].Start.Equal(day0.Add(24*time.Hour)) {
		t.Errorf("worst days %+v, want day 2 then day 3", r.WorstDays)
	}
	// Burn-down: 3 allowed bad events (1% of 300); 0, then 5, then 6 spent.
	want := []float64{1, 1 - 5.0/3, 1 - 6.0/3}
	for i, p := range r.BurnDown {
		if math.Abs(p.BudgetRemaining-want[i]) > 1e-9 {
			t.Errorf("burn-down point %d = %v, want %v", i, p.BudgetRemaining, want[i])
		}
	}
	if last := r.BurnDown[len(r.BurnDown)-1].BudgetRemaining; math.Abs(last-*r.ErrorBudgetRemaining) > 1e-9 {
		t.Errorf("the burn-down ends at %v, the budget at %v", last, *r.ErrorBudgetRemaining)
	}
	for _, f := range report.Formats {
		var b bytes.Buffer
		if err := report.Render(&b, r, f); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !strings.Contains(b.String(), "0.9800") && f != "json" {
			t.Errorf("%s report does not state the SLI 0.9800", f)
		}
		// The budget is overspent: said so, not as a negative share left.
		// Every format says it the same way as the slo page and
		// mcpaudit slo (report.BudgetLeft), not as 200% spent; JSON in
		// error_budget_left as /api/v1/slo.
		const said = "none: spent 2× (error rate 2% against a budget of 1%)"
		if f != "json" && (!strings.Contains(b.String(), "error budget left") && !strings.Contains(b.String(), "Error budget left") ||
			!strings.Contains(b.String(), said) || strings.Contains(b.String(), "-100.00%") || strings.Contains(b.String(), "200.00%") ||
			strings.Contains(b.String(), "overspent by")) {
			t.Errorf("the %s report does not say the budget left: %s:\n%s", f, said, b.String())
		}
		if f == "json" && !strings.Contains(b.String(), `"error_budget_left": "`+said+`"`) {
			t.Errorf("the json report lacks error_budget_left %q:\n%s", said, b.String())
		}
	}
	if err := report.Render(&bytes.Buffer{}, r, "pdf"); err == nil {
		t.Error("an unknown format renders")
	}
}

func TestQueryOf(t *testing.T) {
	now := day0
	f := func(window, until, target, wantErr string) {
		t.Helper()
		_, err := report.QueryOf(window, until, target, 0.999, now)
		if (wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), wantErr)) {
			t.Errorf("QueryOf(%q, %q, %q) = %v, want an error naming %q", window, until, target, err, wantErr)
		}
	}
	f("30d", "", "", "")
	f("", "2026-11-30T00:00:00Z", "0.995", "")
	f("thirty", "", "", "window")
	f("30d", "yesterday", "", "until")
	f("30d", "", "1.5", "target")
}

// TestBudgetLeft: an overspent budget is said as how many times it was spent
// and the error rate against the budget, not as "overspent by 74900.00%"
// (op46).
func TestBudgetLeft(t *testing.T) {
	f := func(left, target float64, want string) {
		t.Helper()
		if got := report.BudgetLeft(left, target); got != want {
			t.Errorf("BudgetLeft(%v, %v) = %q, want %q", left, target, got, want)
		}
	}
	f(1, 0.999, "100.00%")
	f(0.25, 0.999, "25.00%")
	f(0, 0.999, "0.00%")
	f(-1, 0.99, "none: spent 2× (error rate 2% against a budget of 1%)")
	f(-749, 0.999, "none: spent 750× (error rate 75% against a budget of 0.1%)")
	f(-160.79075, 0.999, "none: spent 162× (error rate 16.2% against a budget of 0.1%)")
	f(-11.5, 0.99, "none: spent 12.5× (error rate 12.5% against a budget of 1%)")
	f(-0.0236, 0.999, "none: spent 1.02× (error rate 0.102% against a budget of 0.1%)")
	f(-999, 0.9999, "none: spent 1000× (error rate 10% against a budget of 0.01%)")
	f(math.Inf(-1), 1, "none (a target of 100% leaves no error budget)")
}

// TestRender_MarkdownNames stores bad writes whose document, tool, client
// and server names hold Markdown and HTML, renders the md report and checks
// that each name is literal text in its table row: no raw <script> for a
// renderer to run, no | ending a cell early, no emphasis, link or entity
// made of a name (found by op20: a document named "<script>...</script>"
// came out raw). An underscore inside an id (doc_3446f79a) is left as it is.
func TestRender_MarkdownNames(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	const doc = "inc/nuit é <script>alert(1)</script> a|b *x* [l](u) &lt; `c` _d_ doc_3446f79a \\"
	w := audit.Write{CallID: "c_00000000000000000001", Time: day0.Add(time.Hour), Server: "thegram<b>",
		Tool: "gram_patch", Document: doc, State: audit.StateUnverified, Reason: audit.ReasonNoResponse}
	if err := st.Commit(ctx, audit.Results{Writes: []audit.Write{w}}); err != nil {
		t.Fatal(err)
	}
	r, err := report.Build(ctx, st, report.Query{Window: 30 * 24 * time.Hour, WindowName: "30d", Until: day0.Add(24 * time.Hour), Target: 0.99, Server: "thegram<b>"})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := report.Render(&b, r, "md"); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	const want = "| inc/nuit é \\<script\\>alert(1)\\</script\\> a\\|b \\*x\\* \\[l\\](u) \\&lt; \\`c\\` \\_d\\_ doc_3446f79a \\\\ | 1 |"
	if !strings.Contains(md, want+"\n") {
		t.Errorf("the document's row is not literal text; want the line\n%s\nin\n%s", want, md)
	}
	if strings.Contains(md, "<script>") || strings.Contains(md, "<b>") {
		t.Errorf("the md report holds raw HTML from a name:\n%s", md)
	}
	if !strings.Contains(md, ", server thegram\\<b\\>\n") || !strings.Contains(md, "| thegram\\<b\\> | 1 |") {
		t.Errorf("the server's name is not literal text in the header and its row:\n%s", md)
	}
}

// BenchmarkBuild_EmptyWindow is the cost of a report whose window holds no
// write, over a store of 100,000 writes a month before it: finding where
// they are (Report.Stored) by bisection over Writes.
func BenchmarkBuild_EmptyWindow(b *testing.B) {
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	start := day0.Add(-60 * 24 * time.Hour)
	const n = 100000
	for i := 0; i < n; i += 10000 {
		ws := make([]audit.Write, 0, 10000)
		for j := i; j < i+10000; j++ {
			state := audit.StateDurable
			if j%50 == 0 {
				state = audit.StateUnverified
			}
			ws = append(ws, audit.Write{CallID: fmt.Sprintf("c_%020x", j), Time: start.Add(time.Duration(j) * 20 * time.Second),
				Server: []string{"thegram", "oddlynew"}[j%2], Tool: "gram_patch", State: state})
		}
		if err := st.Commit(context.Background(), audit.Results{Writes: ws}); err != nil {
			b.Fatal(err)
		}
	}
	for _, server := range []string{"", "oddlynew"} {
		b.Run("server="+server, func(b *testing.B) {
			q := report.Query{Window: 30 * 24 * time.Hour, WindowName: "30d", Until: day0.Add(30 * 24 * time.Hour), Target: 0.999, Server: server}
			cs := &countWrites{Store: st}
			for b.Loop() {
				r, err := report.Build(context.Background(), cs, q)
				if err != nil || r.Stored == nil {
					b.Fatalf("%v, stored %v", err, r.Stored)
				}
			}
			b.ReportMetric(float64(cs.n)/float64(b.N), "writes_reads/op")
		})
	}
	// For scale: the report over the window that holds them (no search).
	b.Run("window_with_writes", func(b *testing.B) {
		q := report.Query{Window: 30 * 24 * time.Hour, WindowName: "30d", Until: start.Add(n * 20 * time.Second), Target: 0.999, SkipClients: true, SkipFailures: true}
		for b.Loop() {
			if _, err := report.Build(context.Background(), st, q); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// countWrites counts the reads of Writes.
type countWrites struct {
	audit.Store
	n int
}

func (c *countWrites) Writes(ctx context.Context, q audit.WriteQuery) (audit.WritePage, error) {
	c.n++
	return c.Store.Writes(ctx, q)
}
