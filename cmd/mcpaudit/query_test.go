package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestQueryCommands: findings, timeline, calls and slo answer the same
// through a running server and straight from its data dir, in text and
// JSON.
func TestQueryCommands(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	s := startTest(t, cfg)
	recs := mergedCapture(t)
	resp := postCalls(t, s, ndjson(recs), false)
	var ack struct{ New int }
	json.NewDecoder(resp.Body).Decode(&ack)
	resp.Body.Close()
	if ack.New == 0 {
		t.Fatal("the post stored no call")
	}
	want := analyzeFindings(t, cfg, ndjson(recs))
	waitFindings(t, s, want)

	var stderr string
	cli := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, nil, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		stderr = errb.String()
		return out.String()
	}
	remote := []string{"--api-url", "http://" + s.apiAddr}
	local := []string{"--data-dir", dir}
	for _, where := range [][]string{remote, local} {
		var page audit.FindingPage
		if err := json.Unmarshal([]byte(cli(append([]string{"findings", "--format", "json", "--limit", "500"}, where...)...)), &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Findings) != len(want) {
			t.Errorf("%v: %d findings, want %d", where, len(page.Findings), len(want))
		}
		text := cli(append([]string{"findings", "--kind", "double_applied_write"}, where...)...)
		if strings.Count(text, "double_applied_write") != 3 {
			t.Errorf("%v: text findings:\n%s", where, text)
		}
		tl := cli(append([]string{"timeline", "ops/notes-1d0459.gram"}, where...)...)
		if !strings.Contains(tl, "Timeline of ops/notes-1d0459.gram (7 events)") || !strings.Contains(tl, "double_applied_write") {
			t.Errorf("%v: timeline:\n%s", where, tl)
		}
		// The text names each event's call (or finding) as the JSON does.
		var tlj api.Timeline
		if err := json.Unmarshal([]byte(cli(append([]string{"timeline", "--format", "json", "ops/notes-1d0459.gram"}, where...)...)), &tlj); err != nil {
			t.Fatal(err)
		}
		for _, e := range tlj.Events {
			if id := e.CallID; e.Type != audit.EventFinding && (id == "" || !strings.Contains(tl, id)) {
				t.Errorf("%v: the timeline's text does not name the %s of call %q:\n%s", where, e.Type, id, tl)
			}
		}
		// Every stored call, one line each, counted: the ingest's "new".
		calls := cli(append([]string{"calls", "--format", "json"}, where...)...)
		if n := strings.Count(calls, "\n"); n != ack.New || stderr != callsCounted(ack.New, 0, false)+"\n" {
			t.Errorf("%v: calls printed %d lines and %q, want the %d stored", where, n, stderr, ack.New)
		}
		text = cli(append([]string{"calls", "--document", "ops/notes-1d0459.gram"}, where...)...)
		if lines := strings.Split(strings.TrimSpace(text), "\n"); len(lines) < 3 || !strings.HasPrefix(lines[0], "TIME") || !strings.Contains(text, "gram_patch") {
			t.Errorf("%v: calls of one document:\n%s", where, text)
		}
		slo := cli(append([]string{"slo", "--window", "3650d"}, where...)...)
		if !strings.Contains(slo, "SLI: 0.") || !strings.Contains(slo, "double_applied") {
			t.Errorf("%v: slo:\n%s", where, slo)
		}
	}
}

// TestTimelineDotDocuments: the documents "." and ".." are asked for by
// the timeline's query form, where no dot segment can be resolved away;
// every other name keeps its path. (The empty answer is followed by the
// ask for a call of the document: hintUnknownDocument.)
func TestTimelineDotDocuments(t *testing.T) {
	var got []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.RequestURI)
		io.WriteString(w, `{"document":"x","events":[]}`)
	}))
	defer hs.Close()
	for doc, want := range map[string]string{"..": "/api/v1/documents/timeline?name=..", ".": "/api/v1/documents/timeline?name=.",
		"..?":    "/api/v1/documents/..%3F/timeline",
		"a/../b": "/api/v1/documents/a%2F..%2Fb/timeline"} {
		got = nil
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"timeline", "--api-url", hs.URL, doc}, nil, &out, &errb); code != 0 || len(got) == 0 || got[0] != want {
			t.Errorf("timeline %q: exit %d %s, asked %v, want %s", doc, code, errb.String(), got, want)
		}
	}
}

// TestTimelineShowsIDs: each line of the timeline's text names its call
// (a call and its write) by the id calls prints and /api/v1/calls/{id}
// takes, and a finding by the id findings prints.
func TestTimelineShowsIDs(t *testing.T) {
	f := audit.Finding{Kind: audit.KindDoubleAppliedWrite, Severity: audit.SeverityCritical, Server: "thegram", Document: "ops/n.gram",
		Key: "req-2", Time: time.Date(2026, 11, 2, 9, 0, 2, 0, time.UTC), Calls: []string{"c_1111", "c_2222"}, Summary: "applied twice"}
	tl := api.Timeline{Document: "ops/n.gram", TimelinePage: audit.TimelinePage{Events: []audit.TimelineEvent{
		{Time: f.Time.Add(-time.Second), Type: audit.EventCall, CallID: "c_1111", Server: "thegram", Session: "s-1", Tool: "gram_patch", Outcome: audit.OutcomeNoResponse},
		{Time: f.Time, Type: audit.EventCall, CallID: "c_2222", Server: "thegram", Session: "s-1", Tool: "gram_patch", Outcome: audit.OutcomeOK},
		{Time: f.Time, Type: audit.EventWrite, CallID: "c_2222", Server: "thegram", Session: "s-1", Tool: "gram_patch", Key: "req-2", State: audit.StateDoubleApplied},
		{Time: f.Time, Type: audit.EventFinding, Server: "thegram", Session: "s-1", Finding: &f},
	}}}
	body, err := json.Marshal(tl)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	defer hs.Close()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"timeline", "--api-url", hs.URL, "ops/n.gram"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2+len(tl.Events) || !strings.HasPrefix(lines[1], "TIME") {
		t.Fatalf("timeline:\n%s", out.String())
	}
	if head := strings.Fields(lines[1]); len(head) < 3 || head[2] != "ID" {
		t.Errorf("header %q: want ID after TIME (UTC), as calls and findings print it", lines[1])
	}
	for i, e := range tl.Events {
		want := e.CallID
		if e.Finding != nil {
			want = e.Finding.ID()
		}
		if fields := strings.Fields(lines[2+i]); len(fields) < 4 || fields[2] != want || fields[3] != e.Type {
			t.Errorf("line %q: want the %s's id %s", lines[2+i], e.Type, want)
		}
	}
}

// TestTimelineShowsRevisions: a timeline names, on each call, the
// document's revision and content hash its request expected and its answer
// reported, as the page does, in the table (REVISION, HASH: before → after,
// "-" for a side the payloads do not tell) and in the JSON (revision_before,
// revision_after, hash_before, hash_after, omitted when not told).
func TestTimelineShowsRevisions(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 2, 14, 2, 0, 0, time.UTC)
	const doc = "ops/n.gram"
	mk := func(i int, tool, args, result string) audit.Record {
		c := &audit.Call{ID: fmt.Sprintf("c_%020x", i), Time: t0.Add(time.Duration(i) * time.Second), Server: "thegram", Session: "s-1",
			RPCID: fmt.Sprint(i), Method: "tools/call", Tool: tool, Arguments: []byte(args), Responded: result != ""}
		if result != "" {
			c.Result = []byte(result)
		}
		kind := audit.OpWrite
		if tool == "gram_read" {
			kind = audit.OpRead
		}
		return audit.Record{Call: c, Dialect: "thegram", Outcome: audit.OutcomeOK, Tool: tool,
			Ops: []audit.Op{{Tool: tool, Kind: kind, Target: doc, Status: audit.OpSucceeded}}}
	}
	recs := []audit.Record{
		mk(1, "gram_read", `{"path":"ops/n.gram"}`, `{"structuredContent":{"path":"ops/n.gram","rev":22,"hash":"1a70"}}`),
		mk(2, "gram_patch", `{"path":"ops/n.gram","base_revision":22,"expected_hash":"1a70","request_id":"r1"}`,
			`{"isError":false,"structuredContent":{"path":"ops/n.gram","rev":23,"hash":"2edd"}}`),
		mk(3, "gram_patch", `{"path":"ops/n.gram","base_revision":23,"request_id":"r2"}`, ""), // no answer
		mk(4, "gram_list", `{"path":"ops/n.gram"}`, `{"structuredContent":{"items":[]}}`),     // tells nothing
	}
	recs[2].Outcome = audit.OutcomeNoResponse
	if _, err := st.AppendCalls(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	st.Close()
	cli := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(context.Background(), append(args, "--data-dir", dir, doc), nil, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	want := []struct{ rev, hash string }{{"- → 22", "- → 1a70"}, {"22 → 23", "1a70 → 2edd"}, {"23 → -", "-"}, {"-", "-"}}
	lines := strings.Split(strings.TrimSpace(cli("timeline")), "\n")
	if len(lines) != 2+len(recs) {
		t.Fatalf("timeline:\n%s", strings.Join(lines, "\n"))
	}
	head := lines[1]
	revAt, hashAt, whatAt := strings.Index(head, "REVISION"), strings.Index(head, "HASH"), strings.Index(head, "WHAT")
	if revAt < 0 || hashAt < revAt || whatAt < hashAt {
		t.Fatalf("header %q: want REVISION and HASH columns", head)
	}
	for i, w := range want {
		// The header is ASCII, and tabwriter lines cells up by runes (→
		// is one): a cell's runes start where its header's bytes do.
		l := []rune(lines[2+i])
		col := func(from, to int) string { return strings.TrimSpace(string(l[from:min(to, len(l))])) }
		if rev, hash := col(revAt, hashAt), col(hashAt, whatAt); rev != w.rev || hash != w.hash {
			t.Errorf("call %d: REVISION %q HASH %q, want %q %q:\n%s", i+1, rev, hash, w.rev, w.hash, lines[2+i])
		}
	}
	var tl api.Timeline
	if err := json.Unmarshal([]byte(cli("timeline", "--format", "json")), &tl); err != nil {
		t.Fatal(err)
	}
	wantJSON := [][4]string{{"", "22", "", "1a70"}, {"22", "23", "1a70", "2edd"}, {"23", "", "", ""}, {}}
	for i, e := range tl.Events {
		if got := [4]string{e.RevisionBefore, e.RevisionAfter, e.HashBefore, e.HashAfter}; i >= len(wantJSON) || got != wantJSON[i] {
			t.Errorf("event %d (%s %s): revisions %q", i, e.Type, e.CallID, got)
		}
	}
}

// TestTablesShowNoControlCharacters: a document name with escape sequences
// (it comes from a tool's arguments) is printed with them shown as '?' (a
// zero-width space too, adv23 D5), in
// analyze's table and in the findings and timeline of a running server.
func TestTablesShowNoControlCharacters(t *testing.T) {
	in, err := os.ReadFile("../../testdata/examples/thegram-both-succeeded-double-apply.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	evil := `ops/\u001b]0;PWNED\u0007\u001b[2J\u202e\u200b.gram`
	in = bytes.ReplaceAll(in, []byte("research/log-e29a17.gram"), []byte(evil))
	file := filepath.Join(t.TempDir(), "evil.ndjson")
	if err := os.WriteFile(file, in, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	run(context.Background(), []string{"analyze", "--fail-on", "never", file}, nil, &out, &errb)
	if !strings.Contains(out.String(), "ops/?]0;PWNED??[2J??.gram") || strings.ContainsAny(out.String(), "\x1b\x07\u202e\u200b") {
		t.Errorf("analyze printed:\n%q\nwant the document with its control characters shown as '?'", out.String())
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/timeline") {
			io.WriteString(w, `{"document":"`+evil+`","events":[{"time":"2026-11-02T09:00:00Z","type":"write","key":"k\u001b[31m","state":"durable"}]}`)
			return
		}
		io.WriteString(w, `{"findings":[{"kind":"double_applied_write","severity":"critical","server":"thegram","document":"`+evil+`","time":"2026-11-02T09:00:00Z","summary":"on `+evil+`"}],"next_cursor":""}`)
	}))
	defer hs.Close()
	for _, args := range [][]string{{"findings"}, {"timeline", "x"}} {
		out.Reset()
		if code := run(context.Background(), append(args, "--api-url", hs.URL), nil, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		if !strings.Contains(out.String(), "ops/?]0;PWNED??[2J??.gram") || strings.ContainsAny(out.String(), "\x1b\x07\u202e\u200b") {
			t.Errorf("%v printed:\n%q\nwant control characters shown as '?'", args, out.String())
		}
	}
}

// TestCallsCommand: calls follows next_cursor to the last page, asks for
// pages of at most 1000, stops at --limit in all, passes the filters, and
// prints one line per call: a table, or the API's call objects in JSON.
func TestCallsCommand(t *testing.T) {
	const total = 2345
	var asked []url.Values
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		asked = append(asked, q)
		if r.URL.Path != "/api/v1/calls" {
			http.NotFound(w, r)
			return
		}
		from, _ := strconv.Atoi(q.Get("cursor"))
		n, _ := strconv.Atoi(q.Get("limit"))
		if n <= 0 || n > 1000 {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":"parameter limit"}`)
			return
		}
		var calls []string
		for i := from; i < min(from+n, total); i++ {
			calls = append(calls, fmt.Sprintf(`{"time":"2026-11-02T09:00:%02d.000Z","type":"call","call_id":"c_%020d","server":"thegram","session":"s-\u001b[2J","tool":"gram_read","outcome":"tool_error","code":"E_X","retry_action":"fix_input"}`, i%60, i))
		}
		next := ""
		if from+n < total {
			next = strconv.Itoa(from + n)
		}
		fmt.Fprintf(w, `{"calls":[%s],"next_cursor":%q}`, strings.Join(calls, ","), next)
	}))
	defer hs.Close()
	cli := func(args ...string) (string, string) {
		t.Helper()
		asked = nil
		var out, errb bytes.Buffer
		if code := run(context.Background(), append(args, "--api-url", hs.URL), nil, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		return out.String(), errb.String()
	}
	out, errs := cli("calls", "--mcp-server", "thegram", "--session", "s-1", "--document", "a.gram", "--since", "1h", "--until", "2026-11-03T00:00:00Z")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != total+1 || !strings.HasPrefix(lines[0], "TIME") || errs != "2345 calls\n" {
		t.Fatalf("%d lines (want a header and %d), stderr %q", len(lines), total, errs)
	}
	for i, l := range lines[1:] {
		if !strings.Contains(l, fmt.Sprintf("c_%020d", i)) || !strings.Contains(l, "tool_error / E_X") || !strings.Contains(l, "fix_input") {
			t.Fatalf("line %d: %q", i+1, l)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Error("a control character of a session reached the terminal")
	}
	if len(asked) != 3 || asked[0].Get("cursor") != "" || asked[1].Get("cursor") != "1000" || asked[2].Get("cursor") != "2000" {
		t.Errorf("asked %v, want three pages following the cursor", asked)
	}
	for _, q := range asked {
		if q.Get("server") != "thegram" || q.Get("session") != "s-1" || q.Get("document") != "a.gram" || q.Get("since") != "1h" || q.Get("until") != "2026-11-03T00:00:00Z" {
			t.Errorf("asked %v: a filter is missing", q)
		}
	}

	out, errs = cli("calls", "--limit", "1500", "--format", "json")
	lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 1500 || errs != "1500 calls (--limit 1500; more follow)\n" {
		t.Fatalf("--limit 1500: %d lines, stderr %q", len(lines), errs)
	}
	var last audit.TimelineEvent
	if err := json.Unmarshal([]byte(lines[1499]), &last); err != nil || last.CallID != fmt.Sprintf("c_%020d", 1499) {
		t.Errorf("last line %q: %v", lines[1499], err)
	}
	if len(asked) != 2 || asked[0].Get("limit") != "1000" || asked[1].Get("limit") != "500" {
		t.Errorf("--limit 1500 asked %v, want pages of 1000 and 500", asked)
	}
	// A limit the listing does not reach is no cut.
	if _, errs = cli("calls", "--limit", "5000"); errs != "2345 calls\n" {
		t.Errorf("--limit 5000: %q", errs)
	}
	var errb bytes.Buffer
	if code := run(context.Background(), []string{"calls", "--limit", "-1", "--api-url", hs.URL}, nil, io.Discard, &errb); code != 2 {
		t.Errorf("--limit -1: exit %d %s", code, errb.String())
	}
}

// TestCalls_NoDocumentThroughServe: calls that name no document (a
// gram_projects call, a record whose arguments are a string), acknowledged
// by /v1/calls, are listed by /api/v1/calls and read by their id: before
// the listing, nothing reached them.
func TestCalls_NoDocumentThroughServe(t *testing.T) {
	s := startTest(t, testConfig(t, t.TempDir()))
	body := `{"time":"2026-11-02T09:01:10.110Z","server":"thegram","session":"s-1","duration_ms":8,"request":{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{},"name":"gram_projects"}},"response":{"id":1,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"projects":[]}}}}
{"time":"2026-11-02T09:01:11.110Z","server":"thegram","session":"s-1","duration_ms":8,"request":{"id":2,"jsonrpc":"2.0","method":"tools/call","params":{"arguments":"ops/a.gram","name":"gram_patch"}},"response":{"id":2,"jsonrpc":"2.0","result":{"isError":true,"content":[{"type":"text","text":"bad arguments"}]}}}
`
	resp := postCalls(t, s, []byte(body), false)
	var ack struct{ Accepted, New int }
	json.NewDecoder(resp.Body).Decode(&ack)
	resp.Body.Close()
	if resp.StatusCode != 200 || ack.New != 2 {
		t.Fatalf("post: %s, %+v; want both calls stored", resp.Status, ack)
	}
	base := "http://" + s.apiAddr
	var page api.CallPage
	getJSON(t, base+"/api/v1/calls?server=thegram", &page)
	if len(page.Calls) != 2 || page.Calls[0].Tool != "gram_projects" || page.Calls[1].Tool != "gram_patch" || page.NextCursor != "" {
		t.Fatalf("listing: %+v, want both calls in time order", page)
	}
	for _, c := range page.Calls {
		var d api.CallDetail
		getJSON(t, base+"/api/v1/calls/"+c.CallID, &d)
		if d.Call != c || d.Documents == nil || len(d.Documents) != 0 {
			t.Errorf("call %s: %+v, want the listed call and no document", c.CallID, d)
		}
	}
}

// TestCallsCommand_DataDir: calls reads a data dir over more than one page
// (its store kept open from page to page) and prints every call once, in
// time order.
func TestCallsCommand_DataDir(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	const total = 2100
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	var recs []audit.Record
	for i := range total {
		c := &audit.Call{ID: fmt.Sprintf("c_%020x", i), Time: t0.Add(time.Duration(i) * time.Millisecond), Server: "thegram",
			Session: "s-1", RPCID: fmt.Sprint(i), Method: "tools/call", Tool: "gram_projects", Arguments: []byte(`{}`), Responded: true}
		recs = append(recs, audit.Record{Call: c, Dialect: "thegram", Outcome: audit.OutcomeOK, Tool: c.Tool})
	}
	if _, err := st.AppendCalls(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	st.Close()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"calls", "--data-dir", dir, "--format", "json"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != total || errb.String() != fmt.Sprintf("%d calls\n", total) {
		t.Fatalf("%d lines, stderr %q; want %d calls", len(lines), errb.String(), total)
	}
	for i, l := range lines {
		var e audit.TimelineEvent
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.CallID != recs[i].Call.ID {
			t.Fatalf("line %d: %s (%v), want %s", i, l, err, recs[i].Call.ID)
		}
	}
}

// TestTimelineCommand_Truncated: a timeline longer than the limit says so
// on standard error with the --since to read on from, and following it
// reads every event once (the instant it starts from is shown again).
func TestTimelineCommand_Truncated(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	const total = 1005
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	var recs []audit.Record
	for i := range total {
		c := &audit.Call{ID: fmt.Sprintf("c_%020x", i), Time: t0.Add(time.Duration(i) * time.Millisecond), Server: "thegram",
			Session: "s-1", RPCID: fmt.Sprint(i), Method: "tools/call", Tool: "gram_read", Arguments: []byte(`{"path":"a.gram"}`), Responded: true}
		recs = append(recs, audit.Record{Call: c, Dialect: "thegram", Outcome: audit.OutcomeOK, Tool: c.Tool,
			Ops: []audit.Op{{Tool: c.Tool, Kind: audit.OpRead, Target: "a.gram", Status: audit.OpSucceeded}}})
	}
	if _, err := st.AppendCalls(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	st.Close()
	timeline := func(args ...string) (string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"timeline", "--data-dir", dir}, args...), nil, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		return out.String(), errb.String()
	}
	// The default limit: 1000 of the 1005, and a note.
	// The rest begins after the 1000th call (999 ms), at the 1001st at
	// the latest.
	out, errs := timeline("a.gram")
	_, after, _ := strings.Cut(errs, "--since ")
	next, err := time.Parse(time.RFC3339Nano, firstWord(after))
	if !strings.Contains(out, "(1000 events)") || !strings.Contains(errs, "stopped after 1000 events (--limit 1000)") ||
		err != nil || !next.After(t0.Add(999*time.Millisecond)) || next.After(t0.Add(1000*time.Millisecond)) {
		t.Errorf("default limit: %s\nstderr: %q", firstLine(out), errs)
	}
	// Enough: every event, no note.
	if out, errs := timeline("--limit", "2000", "a.gram"); !strings.Contains(out, "(1005 events)") || errs != "" {
		t.Errorf("--limit 2000: %s\nstderr: %q", firstLine(out), errs)
	}
	// Page by page, as the note says.
	seen := map[string]bool{}
	since := ""
	for range 10 {
		args := []string{"--limit", "300", "--format", "json", "a.gram"}
		if since != "" {
			args = append(args, "--since", since)
		}
		out, errs := timeline(args...)
		var tl api.Timeline
		if err := json.Unmarshal([]byte(out), &tl); err != nil {
			t.Fatal(err)
		}
		for _, e := range tl.Events {
			seen[e.CallID] = true
		}
		if !tl.Truncated {
			if errs != "" {
				t.Errorf("last page: stderr %q", errs)
			}
			break
		}
		since = tl.NextSince.Format(time.RFC3339Nano)
		if !strings.Contains(errs, "--since "+since+" ") {
			t.Fatalf("page from %q: stderr %q does not give --since %s", args, errs, since)
		}
	}
	if len(seen) != total {
		t.Errorf("paging read %d calls, want %d", len(seen), total)
	}
	for _, bad := range []string{"0", "10001"} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"timeline", "--data-dir", dir, "--limit", bad, "a.gram"}, nil, &out, &errb); code != 2 ||
			!strings.Contains(errb.String(), "--limit "+bad+": want 1 to 10000") {
			t.Errorf("--limit %s: exit %d, stderr %q", bad, code, errb.String())
		}
	}
}

func firstLine(s string) string { first, _, _ := strings.Cut(s, "\n"); return first }

func firstWord(s string) string { first, _, _ := strings.Cut(s, " "); return first }

// TestTimelineCommand_EmptyName: an empty document name ("" from a
// script's unset variable) is a usage error naming what is wanted. Until
// adv52 it made the path /api/v1/documents//timeline, which the API's mux
// redirects, and timeline --data-dir printed the redirect's HTML as its
// error ("<a href=...>Temporary Redirect</a>.").
func TestTimelineCommand_EmptyName(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"timeline", "--data-dir", dir, ""}, nil, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "timeline: name one document") || strings.Contains(errb.String(), "<a href") {
		t.Errorf("timeline \"\": exit %d, stderr %q; want exit 2 and \"timeline: name one document\"", code, errb.String())
	}
}
