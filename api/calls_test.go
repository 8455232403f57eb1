package api_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// storedCall is a call of the fixture with what a listing must show of it.
type storedCall struct {
	rec  audit.Record
	docs []string
}

// callFixture is the calls of newCallServer, in time order (then ID
// order, which is also the order they were stored in), with the ID of a
// call that touched no document and of a failed one.
type callFixture struct {
	calls             []storedCall
	noDocument, fails string
	shared            string // an ID stored for both tenants
}

// mkCall builds the record of call i as a dialect reads it: a read of each
// document in docs.
// senders are the sources of the calls mkCall makes, in turn.
var senders = []string{"calls:proxy/thegram/host:8080", "otlp:thegram/pod-b/node-2", "calls:proxy/thegram/host:8080", "otlp:thegram/pod-a"}

func mkCall(i int, tenant, server, session string, at time.Time, tool string, docs ...string) audit.Record {
	c := &audit.Call{ID: fmt.Sprintf("c_%020x", i), Time: at, Duration: time.Millisecond, Server: server,
		Session: session, Client: "claude", Tenant: tenant, RPCID: fmt.Sprint(i), Method: "tools/call", Tool: tool,
		Arguments: []byte(fmt.Sprintf(`{"n":%d}`, i)), Responded: true, Result: []byte(`{"isError":false}`),
		Source: senders[i%len(senders)]}
	c.Fingerprint = audit.Fingerprint(c.Server, c.Session, c.RPCID, c.Tool, canon.Bytes(c.Arguments))
	r := audit.Record{Call: c, Dialect: server, Outcome: audit.OutcomeOK, Tool: tool}
	for j, d := range docs {
		r.Ops = append(r.Ops, audit.Op{Seq: j, Tool: tool, Kind: audit.OpRead, Target: d, Status: audit.OpSucceeded})
	}
	return r
}

// newCallServer serves the API over a real embedded store holding 230
// calls of tenant acme (two servers, three sessions, two documents, some
// at one instant across page boundaries, one that names no document, one
// that failed) and 20 of globex, with a credential per tenant and one for
// every tenant.
func newCallServer(t *testing.T) (*httptest.Server, callFixture) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var fx callFixture
	var recs []audit.Record
	for i := range 250 {
		tenant, server, tool := "acme", "thegram", "gram_read"
		if i%5 == 3 {
			server, tool = "oddlynew", "getDocument"
		}
		if i >= 230 {
			tenant = "globex"
		}
		// Calls 100-109 and 195-204 share an instant each, so that pages
		// of 7 and of the default 100 end inside a run of equal times.
		sec := i
		switch {
		case i >= 100 && i < 110:
			sec = 100
		case i >= 195 && i < 205:
			sec = 195
		}
		docs := []string{[]string{"ops/a.gram", "ops/b.gram"}[i%2]}
		r := mkCall(i, tenant, server, fmt.Sprintf("s-%d", i%3), t0.Add(time.Duration(sec)*time.Second), tool, docs...)
		switch i {
		case 42:
			// A call whose arguments name no document: gram_projects.
			r = mkCall(i, tenant, "thegram", "s-0", r.Call.Time, "gram_projects")
			r.Call.Arguments = []byte(`"not an object"`)
			fx.noDocument = r.Call.ID
		case 77:
			r.Call.Error = &audit.RPCError{Code: -32000, Message: "E_STORAGE"}
			r.Call.Result = nil
			r.Outcome = audit.OutcomeProtocolError
			r.Failure = &audit.Failure{Code: "E_STORAGE", Action: audit.ActionVerifyThenDecide}
			r.Ops[0].Kind, r.Ops[0].Status, r.Ops[0].Failure = audit.OpWrite, audit.OpFailed, r.Failure
			fx.fails = r.Call.ID
		}
		recs = append(recs, r)
		fx.calls = append(fx.calls, storedCall{rec: r, docs: r.Documents()})
	}
	// One exchange posted by both tenants: stored once for each.
	dup := mkCall(999, "globex", "thegram", "s-9", t0.Add(500*time.Second), "gram_read", "ops/a.gram")
	dupAcme := mkCall(999, "acme", "thegram", "s-9", t0.Add(500*time.Second), "gram_read", "ops/a.gram")
	recs = append(recs, dup, dupAcme)
	fx.calls = append(fx.calls, storedCall{rec: dup, docs: dup.Documents()}, storedCall{rec: dupAcme, docs: dupAcme.Documents()})
	fx.shared = dup.Call.ID
	// In two batches, the second out of time order, as posters deliver.
	ctx := context.Background()
	if _, err := st.AppendCalls(ctx, recs[:120]); err != nil {
		t.Fatal(err)
	}
	later := slices.Clone(recs[120:])
	slices.Reverse(later)
	// Equal times keep ID order, which the store's order of equal times
	// (its row order) then agrees with.
	slices.SortStableFunc(later, func(a, b audit.Record) int { return b.Call.Time.Compare(a.Call.Time) })
	for i := 0; i < len(later); {
		j := i
		for j < len(later) && later[j].Call.Time.Equal(later[i].Call.Time) {
			j++
		}
		slices.SortFunc(later[i:j], func(a, b audit.Record) int { return strings.Compare(a.Call.ID, b.Call.ID) })
		i = j
	}
	if _, err := st.AppendCalls(ctx, later); err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(fx.calls, func(a, b storedCall) int {
		return cmp.Or(a.rec.Call.Time.Compare(b.rec.Call.Time), strings.Compare(a.rec.Call.ID, b.rec.Call.ID))
	})
	s := api.New(st, 0.999)
	s.Tenants = map[string]string{"tok-acme": "acme"}
	s.Credentials = map[string]api.Credential{
		"gary":   {Token: "tok-globex", Tenant: "globex"},
		"oncall": {Token: "tok-oncall", Tenant: "*"},
	}
	s.Now = func() time.Time { return t0.Add(time.Hour) }
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs, fx
}

// want returns the IDs of the fixture's calls that keep selects, in order.
func (fx callFixture) want(keep func(c storedCall) bool) []string {
	var out []string
	for _, c := range fx.calls {
		if keep(c) {
			out = append(out, c.rec.Call.ID)
		}
	}
	return out
}

// listCalls follows next_cursor from the first page of path (with its
// query) to the last, checking each page, and returns the IDs in the
// order answered.
func listCalls(t *testing.T, hs *httptest.Server, path, token string, limit int) []string {
	t.Helper()
	u, err := url.Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	var ids []string
	var last time.Time
	for pages := 0; ; pages++ {
		if pages > 300 {
			t.Fatalf("%s: no end of pages", path)
		}
		u.RawQuery = q.Encode()
		status, _, body := do(t, "GET", hs.URL+u.String(), token)
		if status != 200 {
			t.Fatalf("GET %s: %d %s", u, status, body)
		}
		var page struct {
			Calls      []audit.TimelineEvent `json:"calls"`
			NextCursor *string               `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &page); err != nil || page.Calls == nil || page.NextCursor == nil {
			t.Fatalf("GET %s: %s: want calls and next_cursor (%v)", u, body, err)
		}
		wantMax := limit
		if wantMax == 0 {
			wantMax = 100
		}
		if len(page.Calls) > wantMax {
			t.Fatalf("GET %s: %d calls, more than the page of %d", u, len(page.Calls), wantMax)
		}
		if *page.NextCursor != "" && len(page.Calls) == 0 {
			t.Fatalf("GET %s: an empty page with a next_cursor", u)
		}
		for _, c := range page.Calls {
			if c.Type != audit.EventCall {
				t.Fatalf("GET %s: an entry of type %q", u, c.Type)
			}
			if c.Time.Before(last) {
				t.Fatalf("GET %s: %s at %s comes after %s: out of time order", u, c.CallID, c.Time, last)
			}
			last = c.Time
			ids = append(ids, c.CallID)
		}
		if *page.NextCursor == "" {
			return ids
		}
		q.Set("cursor", *page.NextCursor)
	}
}

// TestCalls_Paging: following next_cursor over more calls than a page
// answers every call of the tenant exactly once, in time order, whatever
// the page size, including pages that end inside a run of calls at one
// instant (stored here in ID order, so the order is known).
func TestCalls_Paging(t *testing.T) {
	hs, fx := newCallServer(t)
	acme := fx.want(func(c storedCall) bool { return c.rec.Call.Tenant == "acme" })
	if len(acme) <= 200 {
		t.Fatalf("the fixture has %d acme calls: not more than two default pages", len(acme))
	}
	for _, limit := range []int{0, 1, 7, 100, 1000} {
		if got := listCalls(t, hs, "/api/v1/calls", "tok-acme", limit); !slices.Equal(got, acme) {
			t.Errorf("limit %d: %d calls\n%v\nwant %d\n%v", limit, len(got), got, len(acme), acme)
		}
	}
	// A limit past the cap (1000) is clamped to it, not refused.
	status, _, body := do(t, "GET", hs.URL+"/api/v1/calls?limit=100000", "tok-oncall")
	var page api.CallPage
	if err := json.Unmarshal(body, &page); status != 200 || err != nil || len(page.Calls) != len(fx.calls) || page.NextCursor != "" {
		t.Errorf("limit=100000: %d, %d calls, cursor %q; want 200 and all %d calls on one page", status, len(page.Calls), page.NextCursor, len(fx.calls))
	}
}

// TestCalls_Filters: each filter, and filters together, select the calls
// they name and nothing else, across pages.
func TestCalls_Filters(t *testing.T) {
	hs, fx := newCallServer(t)
	acme := func(keep func(c storedCall) bool) func(c storedCall) bool {
		return func(c storedCall) bool { return c.rec.Call.Tenant == "acme" && keep(c) }
	}
	at := func(sec int) string { return t0.Add(time.Duration(sec) * time.Second).Format(time.RFC3339) }
	for _, tc := range []struct {
		name, query string
		keep        func(c storedCall) bool
	}{
		{"server", "server=oddlynew", func(c storedCall) bool { return c.rec.Call.Server == "oddlynew" }},
		{"session", "session=s-1", func(c storedCall) bool { return c.rec.Call.Session == "s-1" }},
		{"document", "document=ops/b.gram", func(c storedCall) bool { return slices.Contains(c.docs, "ops/b.gram") }},
		{"since_until", "since=" + at(100) + "&until=" + at(195), func(c storedCall) bool {
			return !c.rec.Call.Time.Before(t0.Add(100*time.Second)) && c.rec.Call.Time.Before(t0.Add(195*time.Second))
		}},
		// The server's clock is t0+1h: 58m back is t0+120s.
		{"since_duration", "since=58m", func(c storedCall) bool { return !c.rec.Call.Time.Before(t0.Add(120 * time.Second)) }},
		{"together", "server=thegram&session=s-0&document=ops/a.gram&since=" + at(30) + "&until=" + at(200), func(c storedCall) bool {
			r := c.rec.Call
			return r.Server == "thegram" && r.Session == "s-0" && slices.Contains(c.docs, "ops/a.gram") &&
				!r.Time.Before(t0.Add(30*time.Second)) && r.Time.Before(t0.Add(200*time.Second))
		}},
		{"source", "source=" + url.QueryEscape("otlp:thegram/pod-b/node-2"), func(c storedCall) bool { return c.rec.Call.Source == "otlp:thegram/pod-b/node-2" }},
		{"source_server", "server=thegram&source=" + url.QueryEscape("calls:proxy/thegram/host:8080"), func(c storedCall) bool {
			return c.rec.Call.Server == "thegram" && c.rec.Call.Source == "calls:proxy/thegram/host:8080"
		}},
		{"unknown_server", "server=nobody", func(c storedCall) bool { return false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := fx.want(acme(tc.keep))
			if len(want) == 0 && tc.name != "unknown_server" {
				t.Fatal("the filter selects nothing in the fixture: a useless case")
			}
			if len(want) == len(fx.want(acme(func(storedCall) bool { return true }))) {
				t.Fatal("the filter selects every call: a useless case")
			}
			for _, limit := range []int{3, 0} {
				if got := listCalls(t, hs, "/api/v1/calls?"+tc.query, "tok-acme", limit); !slices.Equal(got, want) {
					t.Errorf("limit %d: %v\nwant %v", limit, got, want)
				}
			}
		})
	}
}

// TestCalls_Tenants: a tenant's credential lists and reads only its
// tenant's calls, another tenant's call is not found, naming another
// tenant is refused, and a credential for every tenant sees them all or
// one tenant's when it names one.
func TestCalls_Tenants(t *testing.T) {
	hs, fx := newCallServer(t)
	of := func(tenant string) []string {
		return fx.want(func(c storedCall) bool { return tenant == "" || c.rec.Call.Tenant == tenant })
	}
	globexOnly := fx.want(func(c storedCall) bool { return c.rec.Call.Tenant == "globex" && c.rec.Call.ID != fx.shared })[0]
	for _, tc := range []struct {
		token, query string
		want         []string
	}{
		{"tok-acme", "", of("acme")},
		{"tok-globex", "", of("globex")},
		{"tok-oncall", "", of("")},
		{"tok-oncall", "?tenant=globex", of("globex")},
		{"tok-acme", "?tenant=acme", of("acme")},
	} {
		if got := listCalls(t, hs, "/api/v1/calls"+tc.query, tc.token, 50); !slices.Equal(got, tc.want) {
			t.Errorf("%s %s: %d calls, want %d", tc.token, tc.query, len(got), len(tc.want))
		}
	}
	for _, tc := range []struct {
		token, path string
		status      int
	}{
		{"tok-acme", "/api/v1/calls/" + globexOnly, 404},
		{"tok-globex", "/api/v1/calls/" + globexOnly, 200},
		{"tok-oncall", "/api/v1/calls/" + globexOnly, 200},
		{"tok-oncall", "/api/v1/calls/" + globexOnly + "?tenant=acme", 404},
		{"tok-acme", "/api/v1/calls/" + fx.shared, 200},
		{"tok-acme", "/api/v1/calls?tenant=globex", 403},
		{"tok-acme", "/api/v1/calls/" + globexOnly + "?tenant=globex", 403},
		{"", "/api/v1/calls", 401},
		{"wrong", "/api/v1/calls/" + globexOnly, 401},
	} {
		status, _, body := do(t, "GET", hs.URL+tc.path, tc.token)
		if status != tc.status {
			t.Errorf("%s %s: %d %s, want %d", tc.token, tc.path, status, body, tc.status)
		}
		if status != 200 && strings.Contains(string(body), `"tool"`) {
			t.Errorf("%s %s: the refusal leaks the call: %s", tc.token, tc.path, body)
		}
	}
}

// TestCalls_Detail: /api/v1/calls/{id} answers the call in the JSON of a
// timeline's call event (the same bytes, as this call's payloads tell no
// revision, which only a timeline's events carry) with its documents; a
// call that names no document is reached too, and an unknown id is 404.
func TestCalls_Detail(t *testing.T) {
	hs, fx := newCallServer(t)
	detail := func(id string) (int, map[string]json.RawMessage) {
		t.Helper()
		status, _, body := do(t, "GET", hs.URL+"/api/v1/calls/"+id, "tok-acme")
		var m map[string]json.RawMessage
		if status == 200 {
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatalf("%s: %v: %s", id, err, body)
			}
		}
		return status, m
	}
	// The failed call, next to its event in the document's timeline.
	status, m := detail(fx.fails)
	if status != 200 || string(m["documents"]) != `["ops/b.gram"]` {
		t.Fatalf("failed call: %d %s", status, m["documents"])
	}
	_, _, tl := do(t, "GET", hs.URL+"/api/v1/documents/ops%2Fb.gram/timeline?limit=10000", "tok-acme")
	var timeline struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(tl, &timeline); err != nil {
		t.Fatal(err)
	}
	var inTimeline json.RawMessage
	for _, ev := range timeline.Events {
		if strings.Contains(string(ev), `"type":"call"`) && strings.Contains(string(ev), fx.fails) {
			inTimeline = ev
		}
	}
	if inTimeline == nil || string(m["call"]) != string(inTimeline) {
		t.Errorf("call %s:\n%s\nthe timeline's event:\n%s", fx.fails, m["call"], inTimeline)
	}
	var ev map[string]any
	json.Unmarshal(m["call"], &ev)
	for k, v := range map[string]any{"type": "call", "call_id": fx.fails, "server": "thegram", "tool": "gram_read",
		"outcome": "protocol_error", "code": "E_STORAGE", "retry_action": "verify_then_decide", "session": "s-2",
		"source": "otlp:thegram/pod-b/node-2"} {
		if ev[k] != v {
			t.Errorf("%s = %v, want %v", k, ev[k], v)
		}
	}

	// The call that names no document: listed, and read by its id.
	status, m = detail(fx.noDocument)
	if status != 200 || string(m["documents"]) != `[]` || !strings.Contains(string(m["call"]), `"tool":"gram_projects"`) {
		t.Errorf("call without a document: %d %s %s", status, m["call"], m["documents"])
	}
	if got := listCalls(t, hs, "/api/v1/calls?session=s-0&until="+url.QueryEscape(t0.Add(50*time.Second).Format(time.RFC3339)), "tok-acme", 0); !slices.Contains(got, fx.noDocument) {
		t.Errorf("the call without a document is not listed: %v", got)
	}

	if status, _, body := do(t, "GET", hs.URL+"/api/v1/calls/c_ffffffffffffffffffff", "tok-acme"); status != 404 || !strings.Contains(string(body), `"error"`) {
		t.Errorf("unknown call: %d %s, want 404 with an error", status, body)
	}
	status, _, body := do(t, "GET", hs.URL+"/api/v1/calls/"+fx.fails+"?server=thegram", "tok-acme")
	var e api.Error
	json.Unmarshal(body, &e)
	if want := `unknown parameter "server"; /api/v1/calls/` + fx.fails + ` takes no parameter but tenant`; status != 400 || e.Error != want {
		t.Errorf("a filter on one call: %d %q, want 400 %q", status, e.Error, want)
	}
}

// TestCalls_BadParameters: a bad parameter is answered 400 with an error
// naming it and why; another method 405.
func TestCalls_BadParameters(t *testing.T) {
	hs, _ := newCallServer(t)
	for _, tc := range []struct {
		query, says string
	}{
		{"since=yesterday", "parameter since: want an RFC 3339 time"},
		{"until=2026-13-01T00:00:00Z", "parameter until: want an RFC 3339 time"},
		{"until=2300-01-01T00:00:00Z", "parameter until: 2300-01-01T00:00:00Z is outside 1678-2261"},
		{"since=-1h", "parameter since"},
		{"limit=-1", "parameter limit: want a non-negative integer"},
		{"limit=ten", "parameter limit: want a non-negative integer"},
		// An integer past 64 bits is too large, not "not an integer"
		// (adv22 G).
		{"limit=99999999999999999999", "parameter limit: 99999999999999999999 is too large: want a non-negative integer of at most 9223372036854775807"},
		{"limit=-99999999999999999999", "parameter limit: want a non-negative integer"},
		{"cursor=garbage!", "parameter cursor: not a next_cursor"},
		{"state=durable", `unknown parameter "state"; /api/v1/calls takes server, session, source, document, since, until, limit, cursor`},
		{"kind=x&id=y", `unknown parameter "id", "kind"`},
	} {
		status, h, body := do(t, "GET", hs.URL+"/api/v1/calls?"+tc.query, "tok-acme")
		var e map[string]any
		if err := json.Unmarshal(body, &e); err != nil || len(e) != 1 || h.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %s is not {\"error\": ...}", tc.query, body)
		}
		if msg, _ := e["error"].(string); status != 400 || !strings.Contains(msg, tc.says) {
			t.Errorf("%s: %d %q, want 400 saying %q", tc.query, status, msg, tc.says)
		}
	}
	status, h, body := do(t, "POST", hs.URL+"/api/v1/calls", "tok-acme")
	if status != 405 || h.Get("Allow") == "" || !strings.Contains(string(body), "not allowed") {
		t.Errorf("POST /api/v1/calls: %d %q %s, want 405 with Allow", status, h.Get("Allow"), body)
	}
}

// TestCalls_TenantField: a reader of every tenant tells two tenants' calls
// apart by their tenant field, in the calls listing and in a document's
// timeline (op21's D4: the exchange both tenants posted came twice with
// nothing to tell which was whose); tenant= narrows both to one.
func TestCalls_TenantField(t *testing.T) {
	hs, fx := newCallServer(t)
	tenantsOf := func(path string, key string) []string {
		t.Helper()
		status, _, body := do(t, "GET", hs.URL+path, "tok-oncall")
		if status != 200 {
			t.Fatalf("%s: %d %s", path, status, body)
		}
		var page map[string]json.RawMessage
		var events []audit.TimelineEvent
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(page[key], &events); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range events {
			if e.CallID == fx.shared {
				out = append(out, e.Type+":"+e.Tenant)
			}
		}
		slices.Sort(out)
		return out
	}
	since := url.QueryEscape(t0.Add(500 * time.Second).Format(time.RFC3339Nano))
	for _, tc := range []struct {
		path, key string
		want      []string
	}{
		{"/api/v1/calls?since=" + since, "calls", []string{"call:acme", "call:globex"}},
		{"/api/v1/calls?tenant=globex&since=" + since, "calls", []string{"call:globex"}},
		{"/api/v1/documents/ops%2Fa.gram/timeline?since=" + since, "events", []string{"call:acme", "call:globex"}},
		{"/api/v1/documents/ops%2Fa.gram/timeline?tenant=acme&since=" + since, "events", []string{"call:acme"}},
	} {
		if got := tenantsOf(tc.path, tc.key); !slices.Equal(got, tc.want) {
			t.Errorf("%s: the shared call comes as %v, want %v", tc.path, got, tc.want)
		}
	}
}
