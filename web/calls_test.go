package web

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/rules"
)

// TestUncertainOutcomesLink: the investigation_url of McpAuditUncertainOutcomes,
// rendered for an alert's labels as Prometheus renders it, opens the calls
// of the alert's server that failed with the alert's retry action over its
// window (its own failure or one of its operations', as
// mcpaudit_call_failures_total counts them), and no other call. Before
// op46 it opened the unverified_write findings, which a client that
// replays correctly never makes, and no page listed calls by retry action.
func TestUncertainOutcomesLink(t *testing.T) {
	st := tempStore(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	fail := func(code string, a audit.RetryAction) *audit.Failure { return &audit.Failure{Code: code, Action: a} }
	type call struct {
		id, server string
		ago        time.Duration
		failure    *audit.Failure // the call's
		opFailure  *audit.Failure // its operation's only
	}
	calls := []call{
		{"c_00000000000000000001", "thegram", 5 * time.Minute, fail("timeout", audit.ActionReplaySameRequest), nil},
		{"c_00000000000000000002", "thegram", 4 * time.Minute, fail("timeout", audit.ActionVerifyThenDecide), nil},
		{"c_00000000000000000003", "thegram", 3 * time.Minute, nil, nil},
		{"c_00000000000000000004", "oddlynew", 3 * time.Minute, fail("COMMIT_UNKNOWN", audit.ActionReplaySameRequest), nil},
		{"c_00000000000000000005", "thegram", 40 * time.Minute, fail("COMMIT_UNKNOWN", audit.ActionReplaySameRequest), nil},
		{"c_00000000000000000006", "oddlynew", 2 * time.Minute, nil, fail("E_STORAGE", audit.ActionVerifyThenDecide)},
		{"c_00000000000000000007", "thegram", time.Minute, fail("COMMIT_UNKNOWN", audit.ActionReplaySameRequest), nil},
	}
	for _, c := range calls {
		ac := &audit.Call{ID: c.id, Time: now.Add(-c.ago), Server: c.server, Session: "s-1", Tool: "gram_patch", Method: "tools/call",
			Arguments: []byte(`{"path":"team/notes.gram"}`)}
		rec := audit.Record{Call: ac, Outcome: audit.OutcomeOK, Tool: ac.Tool, Failure: c.failure,
			Ops: []audit.Op{{Tool: ac.Tool, Kind: audit.OpWrite, Target: "team/notes.gram", Status: audit.OpSucceeded, Failure: c.failure}}}
		if c.failure != nil {
			rec.Outcome = audit.OutcomeNoResponse
		}
		if c.opFailure != nil {
			rec.Outcome, rec.Ops[0].Failure = audit.OutcomeToolError, c.opFailure
		}
		if _, err := st.AppendCalls(ctx, []audit.Record{rec}); err != nil {
			t.Fatal(err)
		}
	}
	q := api.New(st, 0.999)
	q.Now = func() time.Time { return now }
	p, err := New(st, q, Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)

	f, err := rules.Build(rules.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	var link string
	for _, a := range f.Alerts() {
		if a.Alert == "McpAuditUncertainOutcomes" {
			link = a.Annotations["investigation_url"]
		}
	}
	// Prometheus executes an annotation as a Go template with $labels
	// bound to the alert's labels.
	tmpl := template.Must(template.New("url").Parse("{{ $labels := .Labels }}" + link))
	c := client(t)
	for _, tc := range []struct {
		server, action string
		want           []string
	}{
		{"thegram", "replay_same_request", []string{calls[0].id, calls[6].id}},
		{"thegram", "verify_then_decide", []string{calls[1].id}},
		{"oddlynew", "verify_then_decide", []string{calls[5].id}},
	} {
		var b strings.Builder
		if err := tmpl.Execute(&b, map[string]any{"Labels": map[string]string{"server": tc.server, "retry_action": tc.action, "job": "mcpaudit"}}); err != nil {
			t.Fatal(err)
		}
		u := strings.TrimPrefix(b.String(), rules.DefaultWebURL)
		code, page := body(t, c, "GET", hs.URL+u, nil)
		var got []string
		for _, m := range regexp.MustCompile(`<tr class="call" data-call="([^"]+)"`).FindAllStringSubmatch(page, -1) {
			got = append(got, m[1])
		}
		if code != 200 || !slices.Equal(got, tc.want) {
			t.Errorf("%s %s: GET %s: %d, calls %v, want %v", tc.server, tc.action, u, code, got, tc.want)
		}
	}

	// Every retry action of any server, paged; a bad retry action or range
	// is refused with its reason.
	code, page := body(t, c, "GET", hs.URL+"/calls/?since=2026-12-07+03%3A00", nil)
	if n := strings.Count(page, `<tr class="call"`); code != 200 || n != len(calls) {
		t.Errorf("/calls/ since 03:00: %d, %d calls, want every one of %d", code, n, len(calls))
	}
	for u, says := range map[string]string{
		"/calls/?retry_action=retry_blindly":                        `retry_action: "retry_blindly" is not a retry action`,
		"/calls/?since=2026-12-07+03%3A00&until=2026-12-07+02%3A00": "until: 2026-12-07 02:00 is before since",
		"/calls/?since=yesterday":                                   "since",
	} {
		if code, page := body(t, c, "GET", hs.URL+u, nil); code != 400 || !strings.Contains(htmlText(page), says) {
			t.Errorf("GET %s: %d, want 400 saying %q", u, code, says)
		}
	}
}

// htmlText undoes the page's escaping of quotes for a comparison.
func htmlText(s string) string {
	return strings.NewReplacer("&#34;", `"`, "&quot;", `"`, "&#39;", "'").Replace(s)
}

// TestCallList_Pages: the calls list reads the store a batch at a time and
// links to the later calls; following "Later calls" lists every matching
// call once, in time order.
func TestCallList_Pages(t *testing.T) {
	st := tempStore(t)
	ctx := context.Background()
	var recs []audit.Record
	var want []string
	for i := range 1200 {
		c := &audit.Call{ID: "c_" + strings.Repeat("0", 14) + pad6(i), Time: t0.Add(time.Duration(i) * time.Second),
			Server: "thegram", Session: "s-1", Tool: "gram_patch", Method: "tools/call"}
		rec := audit.Record{Call: c, Outcome: audit.OutcomeOK, Tool: c.Tool}
		if i%10 == 3 {
			rec.Outcome, rec.Failure = audit.OutcomeNoResponse, &audit.Failure{Code: "timeout", Action: audit.ActionReplaySameRequest}
			want = append(want, c.ID)
		}
		recs = append(recs, rec)
	}
	if _, err := st.AppendCalls(ctx, recs); err != nil {
		t.Fatal(err)
	}
	p, err := New(st, api.New(st, 0.999), Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	c := client(t)
	var got []string
	pages := 0
	for u := "/calls/?retry_action=replay_same_request&server=thegram"; u != ""; pages++ {
		code, page := body(t, c, "GET", hs.URL+u, nil)
		if code != 200 || pages > 10 {
			t.Fatalf("GET %s: %d (page %d)", u, code, pages)
		}
		for _, m := range regexp.MustCompile(`<tr class="call" data-call="([^"]+)"`).FindAllStringSubmatch(page, -1) {
			got = append(got, m[1])
		}
		u = ""
		if m := regexp.MustCompile(`<a id="next" href="([^"]+)"`).FindStringSubmatch(page); m != nil {
			u = htmlText(strings.ReplaceAll(m[1], "&amp;", "&"))
		}
	}
	if !slices.Equal(got, want) || pages < 2 {
		t.Errorf("%d pages listed %d calls, want the %d replay_same_request calls once each, in order, over more than one page", pages, len(got), len(want))
	}
}

func pad6(i int) string { s := "000000" + strconv.Itoa(i); return s[len(s)-6:] }

// BenchmarkCallList_Rare is the cost of one /calls/ page for a retry action
// of 1 call in 1,000 over 20,000 stored calls: the page reads them all
// (callsRead) to list 20.
func BenchmarkCallList_Rare(b *testing.B) {
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for i := 0; i < 20000; i += 1000 {
		var recs []audit.Record
		for j := i; j < i+1000; j++ {
			c := &audit.Call{ID: "c_" + strings.Repeat("0", 14) + pad6(j), Time: t0.Add(time.Duration(j) * 100 * time.Millisecond),
				Server: "thegram", Session: "s-1", Tool: "gram_patch", Method: "tools/call", Arguments: []byte(`{"path":"team/notes.gram","base_revision":3}`)}
			rec := audit.Record{Call: c, Outcome: audit.OutcomeOK, Tool: c.Tool}
			if j%1000 == 7 {
				rec.Outcome, rec.Failure = audit.OutcomeNoResponse, &audit.Failure{Code: "timeout", Action: audit.ActionVerifyThenDecide}
			}
			recs = append(recs, rec)
		}
		if _, err := st.AppendCalls(ctx, recs); err != nil {
			b.Fatal(err)
		}
	}
	p, err := New(st, api.New(st, 0.999), Config{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	h := p.Handler()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/calls/?retry_action=verify_then_decide", nil))
		if rec.Code != 200 || strings.Count(rec.Body.String(), `<tr class="call"`) != 20 {
			b.Fatalf("%d, %d calls", rec.Code, strings.Count(rec.Body.String(), `<tr class="call"`))
		}
	}
}
