package web

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

// incidentServer is the page without credentials over a real embedded
// store holding three writes to team/notes.gram: at 14:01:30, 14:02:05 and
// 14:09:00 on 2026-12-04, and findings about them: one double_applied_write
// and two unverified_write.
func incidentServer(t *testing.T) *httptest.Server {
	t.Helper()
	return incidentServerWith(t, Config{})
}

// incidentServerWith is incidentServer with cfg.
func incidentServerWith(t *testing.T, cfg Config) *httptest.Server {
	t.Helper()
	return incidentServerAPI(t, cfg, nil)
}

// incidentServerAPI is incidentServerWith with its query server edited by
// edit (when set).
func incidentServerAPI(t *testing.T, cfg Config, edit func(*api.Server)) *httptest.Server {
	t.Helper()
	st := tempStore(t)
	const doc = "team/notes.gram"
	base := time.Date(2026, 12, 4, 14, 0, 0, 0, time.UTC)
	for i, at := range []time.Duration{90 * time.Second, 125 * time.Second, 9 * time.Minute} {
		c := &audit.Call{ID: []string{"c_00000000000000000011", "c_00000000000000000012", "c_00000000000000000013"}[i],
			Time: base.Add(at), Server: "thegram", Session: "s-incident", Tool: "gram_patch", Method: "tools/call", Responded: true,
			Arguments: []byte(`{"path":"` + doc + `","base_revision":3}`), Result: []byte(`{"isError":false,"structuredContent":{"path":"` + doc + `","rev":4}}`)}
		rec := audit.Record{Call: c, Outcome: audit.OutcomeOK, Tool: c.Tool,
			Ops: []audit.Op{{Tool: c.Tool, Kind: audit.OpWrite, Target: doc, Status: audit.OpSucceeded}}}
		if _, err := st.AppendCalls(context.Background(), []audit.Record{rec}); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range []audit.Kind{audit.KindDoubleAppliedWrite, audit.KindUnverifiedWrite, audit.KindUnverifiedWrite} {
		f := audit.Finding{Kind: k, Severity: k.Severity(), Server: "thegram", Document: doc, Session: "s-incident",
			Time: base.Add(time.Duration(i) * time.Minute), Calls: []string{"c_0000000000000000001" + string(rune('1'+i))}, Summary: string(k)}
		if err := st.Commit(context.Background(), audit.Results{Findings: []audit.Finding{f}}); err != nil {
			t.Fatal(err)
		}
	}
	q := api.New(st, 0.999)
	if edit != nil {
		edit(q)
	}
	p, err := New(st, q, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	return hs
}

// shownCalls returns the ids of the calls on a timeline page.
func shownCalls(page string) []string {
	var ids []string
	for _, m := range regexp.MustCompile(`<tr class="call[^"]*" data-call="([^"]+)"`).FindAllStringSubmatch(page, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// TestTimelineTimes: since and until take the times the page shows
// ("2026-12-04 14:02:05.000", UTC), a minute typed by hand and RFC 3339
// alike, and a time it cannot read is named with the forms it takes.
func TestTimelineTimes(t *testing.T) {
	hs := incidentServer(t)
	c := client(t)
	f := func(query string, want ...string) {
		t.Helper()
		code, page := body(t, c, "GET", hs.URL+"/documents/team%2Fnotes.gram?"+query, nil)
		if got := shownCalls(page); code != 200 || strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("?%s: %d, calls %v, want 200 and %v", query, code, got, want)
		}
	}
	f("since=2026-12-04+14:02:05.000", "c_00000000000000000012", "c_00000000000000000013")
	f("since=2026-12-04+14:02&until=2026-12-04+14:03", "c_00000000000000000012")
	f("since=2026-12-04T14:02&until=2026-12-04T14:03", "c_00000000000000000012")
	f("since=2026-12-04T14:02:00Z&until=2026-12-04T14:03:00Z", "c_00000000000000000012")
	f("since=2026-12-04+14:02:00%2B01:00", "c_00000000000000000011", "c_00000000000000000012", "c_00000000000000000013")
	f("until=2026-12-04+14:01:30.001", "c_00000000000000000011")
	f("since=2026-12-04", "c_00000000000000000011", "c_00000000000000000012", "c_00000000000000000013")
	for _, bad := range []string{"14:02", "yesterday", "2026-13-01+14:02"} {
		code, page := body(t, c, "GET", hs.URL+"/documents/team%2Fnotes.gram?since="+bad, nil)
		if code != http.StatusBadRequest || !strings.Contains(page, "since") || !strings.Contains(page, "2026-12-04 14:02") {
			t.Errorf("since=%s: %d, want 400 naming since and the forms it takes:\n%s", bad, code, page)
		}
	}
	// The findings page reads the same forms.
	if code, _ := body(t, c, "GET", hs.URL+"/?since=2026-12-04+14:02:05.000", nil); code != 200 {
		t.Errorf("/?since= in the page's own format: %d, want 200", code)
	}
}

// TestTimelineUnknownName: a document or session no stored call names is
// a clear 404, not an empty timeline; a known one with nothing in the
// range is an empty page.
func TestTimelineUnknownName(t *testing.T) {
	hs := incidentServer(t)
	c := client(t)
	for _, u := range []string{"/documents/team%2Fnotes.grm", "/documents/notes.gram", "/sessions/s-nobody"} {
		code, page := body(t, c, "GET", hs.URL+u, nil)
		if code != http.StatusNotFound || !strings.Contains(page, "no stored call or finding names it") {
			t.Errorf("GET %s: %d, want 404 saying nothing names it:\n%s", u, code, page)
		}
	}
	code, page := body(t, c, "GET", hs.URL+"/documents/team%2Fnotes.gram?since=2026-12-04+15:00", nil)
	if code != 200 || !strings.Contains(page, "No calls in this range.") {
		t.Errorf("a known document with no call in the range: %d:\n%s", code, page)
	}
}

// TestPageIcon: the page names its icon and serves it, so that a browser
// does not ask for /favicon.ico and log a 404 in the console.
func TestPageIcon(t *testing.T) {
	hs := incidentServer(t)
	c := client(t)
	_, page := body(t, c, "GET", hs.URL+"/documents/team%2Fnotes.gram", nil)
	m := regexp.MustCompile(`<link rel="icon" href="(/[^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("the page names no icon: browsers ask for /favicon.ico, which answers 404")
	}
	resp, err := c.Get(hs.URL + m[1])
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "image/") {
		t.Errorf("GET %s: %d %s, want 200 and an image", m[1], resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// TestIndexTotalFollowsKind: "findings matching" counts what the filter
// matches: an alert's investigation_url (/?kind=K&server=S) must not show
// the count of every kind beside the one finding listed.
func TestIndexTotalFollowsKind(t *testing.T) {
	hs := incidentServer(t)
	c := client(t)
	f := func(query string, want int) {
		t.Helper()
		_, page := body(t, c, "GET", hs.URL+"/?"+query, nil)
		m := regexp.MustCompile(`id="total">(\d+)<`).FindStringSubmatch(page)
		rows := strings.Count(page, `<tr class="finding"`)
		if m == nil || m[1] != strconv.Itoa(want) || rows != want {
			t.Errorf("/?%s: findings matching %v, %d rows; want %d", query, m, rows, want)
		}
	}
	f("", 3)
	f("kind=double_applied_write&server=thegram", 1)
	f("kind=unverified_write", 2)
	f("kind=duplicate_create", 0)
	f("severity=critical", 1)
}

// TestPagerMovesOn: "Later calls" and "Older findings" lead to the next
// page, not back to the first.
func TestPagerMovesOn(t *testing.T) {
	hs := incidentServerWith(t, Config{PageSize: 2})
	c := client(t)
	// next resolves the page's link to its next page as a browser does.
	next := func(from, page string) string {
		t.Helper()
		m := regexp.MustCompile(`<a id="next" href="([^"]+)"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no link to the next page on %s:\n%s", from, page)
		}
		base, _ := url.Parse(from)
		ref, err := url.Parse(html.UnescapeString(m[1]))
		if err != nil {
			t.Fatal(err)
		}
		return base.ResolveReference(ref).String()
	}
	u := hs.URL + "/documents/team%2Fnotes.gram"
	_, page := body(t, c, "GET", u, nil)
	if got := shownCalls(page); len(got) != 2 {
		t.Fatalf("first page: %v", got)
	}
	u = next(u, page)
	_, page = body(t, c, "GET", u, nil)
	if got := shownCalls(page); strings.Join(got, " ") != "c_00000000000000000013" {
		t.Errorf("second page of the timeline (%s): calls %v, want [c_00000000000000000013]", u, got)
	}

	ids := regexp.MustCompile(`<tr class="finding" data-kind="[^"]+" data-id="([^"]+)"`)
	u = hs.URL + "/"
	_, page = body(t, c, "GET", u, nil)
	first := ids.FindAllStringSubmatch(page, -1)
	u = next(u, page)
	_, page = body(t, c, "GET", u, nil)
	second := ids.FindAllStringSubmatch(page, -1)
	if len(first) != 2 || len(second) != 1 || second[0][1] == first[0][1] || second[0][1] == first[1][1] {
		t.Errorf("findings pages: %v then (%s) %v, want 2 then the third", first, u, second)
	}
}

// TestIndexLinksToTimeline: filtering the findings by a document or a
// session links to its whole timeline, which holds calls without findings
// too.
func TestIndexLinksToTimeline(t *testing.T) {
	hs := incidentServer(t)
	c := client(t)
	f := func(query, want string) {
		t.Helper()
		_, page := body(t, c, "GET", hs.URL+"/?"+query, nil)
		if !strings.Contains(page, `href="`+want+`"`) {
			t.Errorf("/?%s has no link to %s", query, want)
		}
	}
	f("document=team/notes.gram", "/documents/team%2Fnotes.gram")
	f("document=team/notes.gram&kind=duplicate_create", "/documents/team%2Fnotes.gram")
	f("session=s-incident", "/sessions/s-incident")
}

// TestTimelineFindingsFollowRange: the findings listed on a document's or
// a session's page are those of its since/until, as its calls are, their
// count is what is listed, the page says how many fall outside the range
// and links to them, and a call in the range stays marked as evidence of
// a finding dated before it.
func TestTimelineFindingsFollowRange(t *testing.T) {
	hs := incidentServer(t)
	c := client(t)
	listed := regexp.MustCompile(`<tr data-kind="([^"]+)"><td class="mono"><a href="/findings/[^"]+">([^<]+)</a>`)
	f := func(path, query string, wantTimes []string, wantOutside int) {
		t.Helper()
		code, page := body(t, c, "GET", hs.URL+path+"?"+query, nil)
		var got []string
		for _, m := range listed.FindAllStringSubmatch(page, -1) {
			got = append(got, m[2])
		}
		if code != 200 || strings.Join(got, ",") != strings.Join(wantTimes, ",") {
			t.Errorf("%s?%s: %d, findings at %v, want %v", path, query, code, got, wantTimes)
		}
		if m := regexp.MustCompile(`id="findings-count">\((\d+)\)<`).FindStringSubmatch(page); m == nil || m[1] != strconv.Itoa(len(wantTimes)) {
			t.Errorf("%s?%s: count %v, want (%d), what is listed", path, query, m, len(wantTimes))
		}
		m := regexp.MustCompile(`id="findings-outside">(\d+) more finding`).FindStringSubmatch(page)
		switch {
		case wantOutside == 0 && m != nil:
			t.Errorf("%s?%s: says %s findings are outside the range, want none said", path, query, m[1])
		case wantOutside > 0 && (m == nil || m[1] != strconv.Itoa(wantOutside)):
			t.Errorf("%s?%s: outside the range %v, want %d", path, query, m, wantOutside)
		}
		if wantOutside > 0 && !strings.Contains(page, `show every time`) {
			t.Errorf("%s?%s: no link to the findings outside the range", path, query)
		}
		// One finding falls outside, two fall (nop48: "1 more finding on
		// this document fall outside the range").
		kind := strings.TrimSuffix(strings.Split(path, "/")[1], "s")
		sentence := fmt.Sprintf("%d more findings on this %s fall outside the range", wantOutside, kind)
		if wantOutside == 1 {
			sentence = "1 more finding on this " + kind + " falls outside the range"
		}
		if wantOutside > 0 && !strings.Contains(page, sentence) {
			t.Errorf("%s?%s: the page does not say %q", path, query, sentence)
		}
	}
	for _, path := range []string{"/documents/team%2Fnotes.gram", "/sessions/s-incident"} {
		all := []string{"2026-12-04 14:00:00.000", "2026-12-04 14:01:00.000", "2026-12-04 14:02:00.000"}
		if path == "/sessions/s-incident" {
			slices.Reverse(all) // newest first
		}
		f(path, "", all, 0)
		f(path, "since=2026-12-04+14:00:30&until=2026-12-04+14:01:30", []string{"2026-12-04 14:01:00.000"}, 2)
		f(path, "since=2026-12-04+14:05", nil, 3)
		f(path, "until=2026-12-04+14:01", []string{"2026-12-04 14:00:00.000"}, 2)
		late := all[1:]
		if path == "/sessions/s-incident" {
			late = all[:2]
		}
		f(path, "since=2026-12-04+14:00:30", late, 1)
	}
	// c_...11 (14:01:30) is the evidence of the double-applied write of
	// 14:00, which is outside the range: the row still says so.
	_, page := body(t, c, "GET", hs.URL+"/documents/team%2Fnotes.gram?since=2026-12-04+14:01:30", nil)
	if !regexp.MustCompile(`data-call="c_00000000000000000011" data-kinds="double_applied_write"`).MatchString(page) {
		t.Errorf("a call in the range lost its mark as evidence of a finding dated before the range:\n%s", page)
	}
}

// TestTimelineFindingsCapped: past the 500 findings a page lists, the
// counts come from the store and still follow the range.
func TestTimelineFindingsCapped(t *testing.T) {
	st := tempStore(t)
	base := time.Date(2026, 12, 4, 14, 0, 0, 0, time.UTC)
	var fs []audit.Finding
	for i := range findingsListed + 3 {
		fs = append(fs, audit.Finding{Kind: audit.KindUnverifiedWrite, Severity: audit.KindUnverifiedWrite.Severity(), Server: "thegram",
			Document: "big.gram", Session: "s-big", Time: base.Add(time.Duration(i) * time.Second), Calls: []string{"c_" + strconv.Itoa(100000+i)}, Summary: "u"})
	}
	if err := st.Commit(context.Background(), audit.Results{Findings: fs}); err != nil {
		t.Fatal(err)
	}
	p, err := New(st, api.New(st, 0.999), Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	c := client(t)
	f := func(query string, count, listed, outside int) {
		t.Helper()
		code, page := body(t, c, "GET", hs.URL+"/documents/big.gram?"+query, nil)
		n := strings.Count(page, `<tr data-kind="unverified_write">`)
		m := regexp.MustCompile(`id="findings-count">\((\d+)\)<`).FindStringSubmatch(page)
		o := regexp.MustCompile(`id="findings-outside">(\d+) more`).FindStringSubmatch(page)
		capped := strings.Contains(page, `id="findings-capped"`)
		gotOutside := 0
		if o != nil {
			gotOutside, _ = strconv.Atoi(o[1])
		}
		if code != 200 || m == nil || m[1] != strconv.Itoa(count) || n != listed || gotOutside != outside || capped != (listed < count) {
			t.Errorf("?%s: %d, count %v, %d listed, %d outside, capped %v; want (%d), %d, %d, %v", query, code, m, n, gotOutside, capped, count, listed, outside, listed < count)
		}
	}
	f("", findingsListed+3, findingsListed, 0)
	f("since=2026-12-04+14:00:02", findingsListed+1, findingsListed, 2)
	f("since=2026-12-04+14:00:02&until=2026-12-04+14:00:12", 10, 10, findingsListed-7)
}

// TestFindingsListRangeSaysHowFindingsAreDated: the findings list filtered
// by time says that a finding is dated by its first evidence call (nop48:
// "what happened at 14:02?" filtered 14:02 to 14:03 read "No findings
// match." beside a double-applied write whose second application was at
// 14:02:10, its finding dated 14:01:41), and points to the timelines, which
// mark every evidence call; without a range it says nothing of it.
func TestFindingsListRangeSaysHowFindingsAreDated(t *testing.T) {
	hs := incidentServer(t)
	c := client(t)
	for _, q := range []string{"since=2026-12-04+14:02:30&until=2026-12-04+14:03", "until=2026-12-04+14:00:30", "since=1h"} {
		code, page := body(t, c, "GET", hs.URL+"/?"+q, nil)
		if code != 200 || !strings.Contains(page, `<p id="range-dated"`) || !strings.Contains(page, "dated by its first evidence call") {
			t.Errorf("/?%s: %d, the list does not say how findings are dated:\n%s", q, code, page)
		}
	}
	for _, q := range []string{"", "kind=double_applied_write", "document=team%2Fnotes.gram"} {
		if code, page := body(t, c, "GET", hs.URL+"/?"+q, nil); code != 200 || strings.Contains(page, `id="range-dated"`) {
			t.Errorf("/?%s: %d, the note is shown without a range", q, code)
		}
	}
}
