package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
)

// investigatorTests are the cases of audit.Investigator and of the query
// fields the investigation page added (FindingQuery.ID, State, Newest;
// WriteQuery.Session). Run runs them with the others.
var investigatorTests = []struct {
	name string
	fn   func(t *testing.T, s audit.Store)
}{
	{"Findings/newest_first", testFindingsNewest},
	{"Findings/by_id", testFindingByID},
	{"Lifecycle/transitions", testLifecycle},
	{"Lifecycle/tenant", testLifecycleTenant},
	{"Lifecycle/counts", testFindingCounts},
	{"Lifecycle/withdrawn", testWithdrawn},
	{"Lifecycle/withdrawn_at_restart", testWithdrawnAtRestart},
	{"Calls/by_id", testCallsByID},
	{"Calls/by_document_and_session", testCallsBy},
	{"Calls/session_among_others", testCallsSession},
	{"Calls/by_server_and_tenant", testCallsList},
	{"Writes/session", testWritesSession},
	{"FailureCounts", testFailureCounts},
	{"WriteCounts/hours", testWriteCountsHours},
}

func testFindingsNewest(t *testing.T, s audit.Store) {
	fs := findingSet()
	commit(t, s, audit.Results{Findings: fs})
	sortFindings(fs)
	want := findingIDs(fs)
	slices.Reverse(want)
	for _, limit := range []int{1, 5, 100} {
		got := allFindings(t, s, audit.FindingQuery{Newest: true, Limit: limit})
		if !reflect.DeepEqual(findingIDs(got), want) {
			t.Errorf("newest first, limit %d: %v, want %v", limit, findingIDs(got), want)
		}
	}
	// Filters apply as in time order.
	got := allFindings(t, s, audit.FindingQuery{Newest: true, Server: "oddlynew", Limit: 4})
	var wantOdd []string
	for i := len(fs) - 1; i >= 0; i-- {
		if fs[i].Server == "oddlynew" {
			wantOdd = append(wantOdd, fs[i].ID())
		}
	}
	if !reflect.DeepEqual(findingIDs(got), wantOdd) {
		t.Errorf("newest first by server: %v, want %v", findingIDs(got), wantOdd)
	}
	// A cursor of one order is refused by the other.
	p, err := s.Findings(ctx(t), audit.FindingQuery{Newest: true, Limit: 2})
	if err != nil || p.NextCursor == "" {
		t.Fatalf("first page: %v, cursor %q", err, p.NextCursor)
	}
	if _, err := s.Findings(ctx(t), audit.FindingQuery{Cursor: p.NextCursor}); !errors.Is(err, audit.ErrBadCursor) {
		t.Errorf("a newest-first cursor in time order: %v, want ErrBadCursor", err)
	}
}

func testFindingByID(t *testing.T, s audit.Store) {
	fs := findingSet()
	commit(t, s, audit.Results{Findings: fs})
	for _, f := range []audit.Finding{fs[0], fs[7], fs[23]} {
		got := allFindings(t, s, audit.FindingQuery{ID: f.ID()})
		if len(got) != 1 || !reflect.DeepEqual(got[0], f) {
			t.Errorf("finding %s: got %+v, want %+v", f.ID(), got, f)
		}
	}
	if got := allFindings(t, s, audit.FindingQuery{ID: "f_00000000000000000000"}); len(got) != 0 {
		t.Errorf("unknown id: got %d findings", len(got))
	}
	// The id filter still honours the tenant.
	if got := allFindings(t, s, audit.FindingQuery{ID: fs[0].ID(), Tenant: "globex"}); len(got) != 0 {
		t.Errorf("finding of acme read as globex: %+v", got)
	}
}

// change makes a state change at event second sec.
func change(t *testing.T, s audit.Store, id, tenant string, st audit.FindingState, by, note string, sec int) (audit.FindingStatus, error) {
	t.Helper()
	return s.ChangeFinding(ctx(t), audit.FindingChange{FindingID: id, Tenant: tenant, State: st, By: by, Note: note, Time: at(sec)})
}

func testLifecycle(t *testing.T, s audit.Store) {
	fs := findingSet()
	commit(t, s, audit.Results{Findings: fs})
	f, g := fs[0], fs[1]
	st, err := change(t, s, f.ID(), "", audit.FindingAcknowledged, "oncall", "looking", 100)
	if err != nil {
		t.Fatalf("ack: %v", err)
	}
	want := audit.FindingStatus{State: audit.FindingAcknowledged, By: "oncall", Note: "looking", At: at(100)}
	if st != want {
		t.Errorf("ack returned %+v, want %+v", st, want)
	}
	got := allFindings(t, s, audit.FindingQuery{ID: f.ID()})
	if len(got) != 1 || got[0].Status == nil || *got[0].Status != want {
		t.Fatalf("after ack, Findings gives %+v, want status %+v", got, want)
	}
	// A second acknowledgement replaces the note; resolve; then ack again
	// is refused, reopening is not.
	if _, err := change(t, s, f.ID(), "", audit.FindingAcknowledged, "oncall", "still looking", 101); err != nil {
		t.Fatalf("second ack: %v", err)
	}
	if _, err := change(t, s, f.ID(), "", audit.FindingResolved, "alice", "replayed by hand", 102); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if _, err := change(t, s, f.ID(), "", audit.FindingAcknowledged, "bob", "", 103); !errors.Is(err, audit.ErrStateConflict) {
		t.Errorf("ack of a resolved finding: %v, want ErrStateConflict", err)
	}
	if _, err := change(t, s, "f_00000000000000000000", "", audit.FindingAcknowledged, "bob", "", 103); !errors.Is(err, audit.ErrNotFound) {
		t.Errorf("ack of an unknown finding: %v, want ErrNotFound", err)
	}
	if _, err := change(t, s, g.ID(), "", audit.FindingResolved, "bob", "", 104); err != nil {
		t.Fatalf("resolve g: %v", err)
	}
	if _, err := change(t, s, g.ID(), "", audit.FindingOpen, "bob", "not fixed after all", 105); err != nil {
		t.Fatalf("reopen g: %v", err)
	}
	hist, err := s.FindingHistory(ctx(t), f.ID(), "")
	if err != nil {
		t.Fatal(err)
	}
	var trail []string
	for _, c := range hist {
		trail = append(trail, fmt.Sprintf("%s by %s at %s: %s", c.State, c.By, c.Time.Sub(T0).Round(time.Second), c.Note))
		if c.FindingID != f.ID() || c.Tenant != f.Tenant {
			t.Errorf("history entry %+v names another finding or tenant", c)
		}
	}
	wantTrail := []string{"acknowledged by oncall at 1m40s: looking", "acknowledged by oncall at 1m41s: still looking",
		"resolved by alice at 1m42s: replayed by hand"}
	if !reflect.DeepEqual(trail, wantTrail) {
		t.Errorf("history = %q, want %q", trail, wantTrail)
	}
	// State filters: f resolved, g reopened (open), the rest never changed.
	if got := allFindings(t, s, audit.FindingQuery{State: audit.FindingResolved}); !reflect.DeepEqual(findingIDs(got), []string{f.ID()}) {
		t.Errorf("resolved findings: %v, want [%s]", findingIDs(got), f.ID())
	}
	open := allFindings(t, s, audit.FindingQuery{State: audit.FindingOpen})
	if len(open) != len(fs)-1 || slices.Contains(findingIDs(open), f.ID()) || !slices.Contains(findingIDs(open), g.ID()) {
		t.Errorf("open findings: %d (want %d), resolved one among them: %v", len(open), len(fs)-1, slices.Contains(findingIDs(open), f.ID()))
	}
	for _, o := range open {
		if o.ID() == g.ID() && (o.Status == nil || o.Status.State != audit.FindingOpen || o.Status.By != "bob") {
			t.Errorf("reopened finding has status %+v", o.Status)
		}
	}
	if got := allFindings(t, s, audit.FindingQuery{State: audit.FindingAcknowledged}); len(got) != 0 {
		t.Errorf("acknowledged findings: %v, want none", findingIDs(got))
	}
}

func testLifecycleTenant(t *testing.T, s audit.Store) {
	fs := findingSet()
	commit(t, s, audit.Results{Findings: fs})
	acme := fs[0] // tenant acme
	if _, err := change(t, s, acme.ID(), "globex", audit.FindingAcknowledged, "eve", "", 100); !errors.Is(err, audit.ErrNotFound) {
		t.Errorf("globex acknowledging an acme finding: %v, want ErrNotFound", err)
	}
	if _, err := change(t, s, acme.ID(), "acme", audit.FindingAcknowledged, "ann", "", 100); err != nil {
		t.Fatalf("acme acknowledging its finding: %v", err)
	}
	if h, err := s.FindingHistory(ctx(t), acme.ID(), "globex"); err != nil || len(h) != 0 {
		t.Errorf("globex reading acme's history: %v, %v; want nothing", h, err)
	}
	if h, err := s.FindingHistory(ctx(t), acme.ID(), "acme"); err != nil || len(h) != 1 || h[0].By != "ann" {
		t.Errorf("acme reading its history: %+v, %v", h, err)
	}
}

func testFindingCounts(t *testing.T, s audit.Store) {
	fs := findingSet()
	commit(t, s, audit.Results{Findings: fs})
	ack, res := fs[0], fs[8] // both double_applied_write
	if _, err := change(t, s, ack.ID(), "", audit.FindingAcknowledged, "a", "", 100); err != nil {
		t.Fatal(err)
	}
	if _, err := change(t, s, res.ID(), "", audit.FindingResolved, "a", "", 100); err != nil {
		t.Fatal(err)
	}
	count := func(q audit.FindingQuery) map[string]int64 {
		t.Helper()
		cs, err := s.FindingCounts(ctx(t), q)
		if err != nil {
			t.Fatalf("FindingCounts: %v", err)
		}
		out := map[string]int64{}
		for _, c := range cs {
			out[string(c.Kind)+"/"+string(c.State)] += c.Count
		}
		return out
	}
	want := map[string]int64{}
	for _, f := range fs {
		st := audit.FindingOpen
		switch f.ID() {
		case ack.ID():
			st = audit.FindingAcknowledged
		case res.ID():
			st = audit.FindingResolved
		}
		want[string(f.Kind)+"/"+string(st)]++
	}
	if got := count(audit.FindingQuery{}); !reflect.DeepEqual(got, want) {
		t.Errorf("counts = %v, want %v", got, want)
	}
	want = map[string]int64{}
	for _, f := range fs {
		if f.Server == "oddlynew" && !f.Time.Before(at(4)) {
			want[string(f.Kind)+"/open"]++
		}
	}
	if got := count(audit.FindingQuery{Server: "oddlynew", Since: at(4), Limit: 1}); !reflect.DeepEqual(got, want) {
		t.Errorf("counts of oddlynew since 4s = %v, want %v", got, want)
	}
}

// testWithdrawnAtRestart: what a restart's withdrawal of a stored
// unverified_write (wd19, docs/detection.md "Late calls") needs of a store.
// FindingIDs lists a finding whatever its lifecycle state, so that the
// replay recognizes one acknowledged, resolved or withdrawn as stored; a
// finding of a tenant, acknowledged or resolved by a person, is withdrawn
// under its tenant; withdrawing it again (a withdrawal committed before a
// crash, made again by the restart) is ErrStateConflict and adds nothing
// to its history; a finding the store does not hold is ErrNotFound; and
// the finding committed again (a replay that makes it) stays withdrawn.
func testWithdrawnAtRestart(t *testing.T, s audit.Store) {
	var fs []audit.Finding
	for i := range 4 {
		f := finding(audit.KindUnverifiedWrite, i+1, fmt.Sprintf("w-%d.gram", i), id(i))
		f.Tenant = []string{"acme", ""}[i%2]
		fs = append(fs, f)
	}
	commit(t, s, audit.Results{Findings: fs})
	if _, err := change(t, s, fs[1].ID(), "", audit.FindingAcknowledged, "oncall", "looking", 100); err != nil {
		t.Fatal(err)
	}
	if _, err := change(t, s, fs[2].ID(), "acme", audit.FindingResolved, "oncall", "", 100); err != nil {
		t.Fatal(err)
	}
	for _, f := range fs[:3] {
		if _, err := change(t, s, f.ID(), f.Tenant, audit.FindingWithdrawn, "mcpaudit", "withdrawn by mcpaudit at a restart: call c_9", 101); err != nil {
			t.Fatalf("withdraw %s (tenant %q): %v", f.ID(), f.Tenant, err)
		}
	}
	ids, err := s.FindingIDs(ctx(t), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if !ids[f.ID()] {
			t.Errorf("FindingIDs lacks %s (state %s): %v", f.ID(), stateOf(t, s, f.ID()), ids)
		}
	}
	if _, err := change(t, s, fs[1].ID(), fs[1].Tenant, audit.FindingWithdrawn, "mcpaudit", "again", 102); !errors.Is(err, audit.ErrStateConflict) {
		t.Errorf("withdrawing a withdrawn finding again: %v, want ErrStateConflict", err)
	}
	if h, err := s.FindingHistory(ctx(t), fs[1].ID(), ""); err != nil || len(h) != 2 || h[1].Note != "withdrawn by mcpaudit at a restart: call c_9" {
		t.Errorf("history after a second withdrawal: %+v, %v; want acknowledged, withdrawn once", h, err)
	}
	gone := finding(audit.KindUnverifiedWrite, 5, "gone.gram", id(99))
	if _, err := change(t, s, gone.ID(), "", audit.FindingWithdrawn, "mcpaudit", "", 102); !errors.Is(err, audit.ErrNotFound) {
		t.Errorf("withdrawing a finding not stored: %v, want ErrNotFound", err)
	}
	commit(t, s, audit.Results{Findings: fs[:3]})
	for _, f := range fs[:3] {
		if st := stateOf(t, s, f.ID()); st != audit.FindingWithdrawn {
			t.Errorf("%s committed again after its withdrawal: %s, want withdrawn", f.ID(), st)
		}
	}
	if st := stateOf(t, s, fs[3].ID()); st != audit.FindingOpen {
		t.Errorf("%s: %s, want open", fs[3].ID(), st)
	}
}

// stateOf returns the lifecycle state of the finding id, found by its id.
func stateOf(t *testing.T, s audit.Store, id string) audit.FindingState {
	t.Helper()
	got := allFindings(t, s, audit.FindingQuery{ID: id})
	if len(got) != 1 {
		t.Fatalf("finding %s by its id: %d findings", id, len(got))
	}
	return got[0].StateOf()
}

// testWithdrawn: a finding the collector withdrew (audit.FindingWithdrawn)
// is left out of lists and counts unless asked for by state or id, keeps
// its history, and no person may change it again; one a person
// acknowledged or resolved can be withdrawn (rev18w).
func testWithdrawn(t *testing.T, s audit.Store) {
	fs := findingSet()
	commit(t, s, audit.Results{Findings: fs})
	plain, acked, resolved := fs[0], fs[1], fs[8]
	if _, err := change(t, s, acked.ID(), "", audit.FindingAcknowledged, "oncall", "looking", 100); err != nil {
		t.Fatal(err)
	}
	if _, err := change(t, s, resolved.ID(), "", audit.FindingResolved, "oncall", "", 100); err != nil {
		t.Fatal(err)
	}
	gone := []string{plain.ID(), acked.ID(), resolved.ID()}
	for _, id := range gone {
		st, err := change(t, s, id, "", audit.FindingWithdrawn, "mcpaudit", "withdrawn by call c_1", 101)
		if err != nil || st.State != audit.FindingWithdrawn {
			t.Fatalf("withdraw %s: %+v, %v", id, st, err)
		}
	}
	var kept []audit.Finding
	for _, f := range fs {
		if !slices.Contains(gone, f.ID()) {
			kept = append(kept, f)
		}
	}
	sortFindings(kept)
	if got := allFindings(t, s, audit.FindingQuery{}); !reflect.DeepEqual(findingIDs(got), findingIDs(kept)) {
		t.Errorf("findings without state = %v, want %v (none withdrawn)", findingIDs(got), findingIDs(kept))
	}
	got := allFindings(t, s, audit.FindingQuery{State: audit.FindingWithdrawn})
	want := []audit.Finding{plain, acked, resolved}
	sortFindings(want)
	if !reflect.DeepEqual(findingIDs(got), findingIDs(want)) {
		t.Errorf("state=withdrawn = %v, want %v", findingIDs(got), findingIDs(want))
	}
	for _, f := range got {
		if f.Status == nil || f.Status.State != audit.FindingWithdrawn || f.Status.By != "mcpaudit" {
			t.Errorf("withdrawn %s: status %+v", f.ID(), f.Status)
		}
	}
	if got := allFindings(t, s, audit.FindingQuery{ID: acked.ID()}); len(got) != 1 || got[0].StateOf() != audit.FindingWithdrawn {
		t.Errorf("withdrawn finding by id: %+v, want it, withdrawn", got)
	}
	if h, err := s.FindingHistory(ctx(t), acked.ID(), ""); err != nil || len(h) != 2 || h[0].State != audit.FindingAcknowledged || h[1].State != audit.FindingWithdrawn {
		t.Errorf("history of the acknowledged then withdrawn finding: %+v, %v", h, err)
	}
	for _, st := range []audit.FindingState{audit.FindingAcknowledged, audit.FindingResolved, audit.FindingOpen, audit.FindingWithdrawn} {
		if _, err := change(t, s, plain.ID(), "", st, "bob", "", 102); !errors.Is(err, audit.ErrStateConflict) {
			t.Errorf("%s of a withdrawn finding: %v, want ErrStateConflict", st, err)
		}
	}
	cs, err := s.FindingCounts(ctx(t), audit.FindingQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range cs {
		if c.State == audit.FindingWithdrawn {
			t.Errorf("counts without state hold withdrawn: %+v", c)
		}
		n += c.Count
	}
	if n != int64(len(kept)) {
		t.Errorf("counts without state add up to %d, want %d", n, len(kept))
	}
	cs, err = s.FindingCounts(ctx(t), audit.FindingQuery{State: audit.FindingWithdrawn})
	if err != nil {
		t.Fatal(err)
	}
	n = 0
	for _, c := range cs {
		if c.State != audit.FindingWithdrawn {
			t.Errorf("counts of state=withdrawn hold %+v", c)
		}
		n += c.Count
	}
	if n != 3 {
		t.Errorf("withdrawn counted %d, want 3", n)
	}
	// A document's timeline leaves withdrawn findings out as the lists do
	// (fx19w, D1 of live19: it listed a withdrawn unverified_write as if it
	// stood, where the page and findings --document hid it).
	for _, doc := range []string{"doc-0.gram", "doc-1.gram", "doc-2.gram"} {
		page, err := s.Timeline(ctx(t), audit.TimelineQuery{Document: doc})
		if err != nil {
			t.Fatal(err)
		}
		var got, want []string
		for _, ev := range page.Events {
			if ev.Type == audit.EventFinding {
				got = append(got, ev.Finding.ID())
			}
		}
		for _, f := range kept {
			if f.Document == doc {
				want = append(want, f.ID())
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("timeline of %s: findings %v, want %v (none withdrawn)", doc, got, want)
		}
	}
}

func testCallsByID(t *testing.T, s audit.Store) {
	recs := []audit.Record{rec(1, 1, "a.gram"), failed(rec(2, 2, "a.gram"), "E_STORAGE", audit.ActionVerifyThenDecide),
		timedOut(rec(3, 3, "b.gram")), rec(4, 4)}
	recs[3].Call.Tenant = "globex"
	appendCalls(t, s, recs...)
	p, err := s.Calls(ctx(t), audit.CallQuery{IDs: []string{id(3), id(1), "c_ffffffffffffffffffff"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Calls) != 2 || !reflect.DeepEqual(p.Calls[0], recs[0]) || !reflect.DeepEqual(p.Calls[1], recs[2]) {
		t.Fatalf("Calls by id =\n %+v\nwant\n %+v", p.Calls, []audit.Record{recs[0], recs[2]})
	}
	// The tenant is checked: globex's call is not acme's.
	p, err = s.Calls(ctx(t), audit.CallQuery{IDs: []string{id(4)}, Tenant: "acme"})
	if err != nil || len(p.Calls) != 0 {
		t.Fatalf("globex call read as acme: %+v, %v", p.Calls, err)
	}
	p, err = s.Calls(ctx(t), audit.CallQuery{IDs: []string{id(4)}, Tenant: "globex"})
	if err != nil || len(p.Calls) != 1 || !reflect.DeepEqual(p.Calls[0], recs[3]) {
		t.Fatalf("globex call: %+v, %v", p.Calls, err)
	}
}

func allCalls(t *testing.T, s audit.Store, q audit.CallQuery) []string {
	t.Helper()
	var out []string
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("Calls: no end of pages")
		}
		p, err := s.Calls(ctx(t), q)
		if err != nil {
			t.Fatalf("Calls: %v", err)
		}
		if q.Limit > 0 && len(p.Calls) > q.Limit {
			t.Fatalf("Calls returned %d, more than the limit %d", len(p.Calls), q.Limit)
		}
		for i, r := range p.Calls {
			if i > 0 && r.Call.Time.Before(p.Calls[i-1].Call.Time) {
				t.Fatalf("Calls out of time order")
			}
			out = append(out, r.Call.ID)
		}
		if p.NextCursor == "" {
			return out
		}
		q.Cursor = p.NextCursor
	}
}

func testCallsBy(t *testing.T, s audit.Store) {
	var recs []audit.Record
	for i := range 40 {
		docs := []string{fmt.Sprintf("doc-%d.gram", i%3)}
		if i%4 == 0 {
			docs = append(docs, "shared.gram")
		}
		r := rec(i, i, docs...)
		r.Call.Tenant = []string{"acme", "globex"}[i%5/4] // every fifth is globex
		recs = append(recs, r)
	}
	// In two batches, the second out of time order.
	appendCalls(t, s, recs[:25]...)
	later := slices.Clone(recs[25:])
	slices.Reverse(later)
	appendCalls(t, s, later...)
	want := func(keep func(r audit.Record) bool) []string {
		var out []string
		for _, r := range recs {
			if keep(r) {
				out = append(out, r.Call.ID)
			}
		}
		return out
	}
	f := func(name string, q audit.CallQuery, keep func(r audit.Record) bool) {
		t.Helper()
		w := want(keep)
		if len(w) == 0 {
			t.Fatalf("%s: the query matches nothing: a useless case", name)
		}
		for _, limit := range []int{0, 1, 3, 7} {
			q.Limit = limit
			if got := allCalls(t, s, q); !reflect.DeepEqual(got, w) {
				t.Errorf("%s, limit %d: %v, want %v", name, limit, got, w)
			}
		}
	}
	f("document", audit.CallQuery{Document: "doc-1.gram"}, func(r audit.Record) bool { return slices.Contains(r.Documents(), "doc-1.gram") })
	f("second document", audit.CallQuery{Document: "shared.gram"}, func(r audit.Record) bool { return slices.Contains(r.Documents(), "shared.gram") })
	f("document of a tenant", audit.CallQuery{Document: "doc-2.gram", Tenant: "acme"}, func(r audit.Record) bool {
		return slices.Contains(r.Documents(), "doc-2.gram") && r.Call.Tenant == "acme"
	})
	f("session", audit.CallQuery{Session: "s-2"}, func(r audit.Record) bool { return r.Call.Session == "s-2" })
	f("session in a span", audit.CallQuery{Session: "s-1", Since: at(10), Until: at(30)}, func(r audit.Record) bool {
		return r.Call.Session == "s-1" && !r.Call.Time.Before(at(10)) && r.Call.Time.Before(at(30))
	})
	// A session's calls filtered by tenant and server too: the embedded
	// store reads these from the record's head without decoding the rest.
	f("session of a tenant", audit.CallQuery{Session: "s-2", Tenant: "acme"}, func(r audit.Record) bool {
		return r.Call.Session == "s-2" && r.Call.Tenant == "acme"
	})
	f("session on a server", audit.CallQuery{Session: "s-2", Server: recs[2].Call.Server}, func(r audit.Record) bool {
		return r.Call.Session == "s-2" && r.Call.Server == recs[2].Call.Server
	})
	f("time only", audit.CallQuery{Since: at(35)}, func(r audit.Record) bool { return !r.Call.Time.Before(at(35)) })
	if got := allCalls(t, s, audit.CallQuery{Session: "nobody"}); len(got) != 0 {
		t.Errorf("unknown session: %v", got)
	}
	// Payloads come back whole.
	p, err := s.Calls(ctx(t), audit.CallQuery{Session: "s-0", Limit: 1})
	if err != nil || len(p.Calls) != 1 || !reflect.DeepEqual(p.Calls[0], recs[0]) {
		t.Errorf("first call of s-0: %+v, %v; want %+v", p.Calls, err, recs[0])
	}
	if _, err := s.Calls(ctx(t), audit.CallQuery{Document: "doc-1.gram", Cursor: "garbage!"}); !errors.Is(err, audit.ErrBadCursor) {
		t.Errorf("bad cursor: %v, want ErrBadCursor", err)
	}
}

// testCallsList: the listing of /api/v1/calls. Filters without a document
// or session (server, tenant, time) page over every call, calls that name
// no document included, and a run of calls at one instant that pages end
// inside of comes once each.
func testCallsList(t *testing.T, s audit.Store) {
	var recs []audit.Record
	for i := range 60 {
		sec := i
		if i >= 20 && i < 35 {
			sec = 20
		}
		r := rec(i, sec, fmt.Sprintf("doc-%d.gram", i%3))
		if i%4 == 1 {
			r.Call.Server = "oddlynew"
		}
		if i%5 == 4 {
			r.Call.Tenant = "globex"
		}
		// Senders as serve names them; the others name their line.
		switch i % 7 {
		case 0, 3:
			r.Call.Source = "otlp:thegram/pod-b/node-2"
		case 5:
			r.Call.Source = "calls:proxy/thegram/host:8080"
		}
		if i%10 == 7 {
			// gram_projects names no document.
			r.Call.Tool, r.Tool, r.Ops = "gram_projects", "gram_projects", nil
			r.Call.Arguments = []byte(`{}`)
			r.Call.Fingerprint = audit.Fingerprint(r.Call.Server, r.Call.Session, r.Call.RPCID, r.Call.Tool, canon.Bytes(r.Call.Arguments))
		}
		recs = append(recs, r)
	}
	// In two batches, the second out of time order: calls of one instant
	// are stored out of ID order.
	appendCalls(t, s, recs[:30]...)
	later := slices.Clone(recs[30:])
	slices.Reverse(later)
	appendCalls(t, s, later...)
	f := func(name string, q audit.CallQuery, keep func(r audit.Record) bool) {
		t.Helper()
		var want []string
		for _, r := range recs {
			if keep(r) {
				want = append(want, r.Call.ID)
			}
		}
		if len(want) == 0 || len(want) == len(recs) && name != "every call" {
			t.Fatalf("%s: the query matches %d of %d calls: a useless case", name, len(want), len(recs))
		}
		for _, limit := range []int{0, 1, 3, 7} {
			q.Limit = limit
			got := allCalls(t, s, q)
			// Time order is checked by allCalls; calls of one instant may
			// come in an order of the store's own, each once.
			sorted := slices.Clone(got)
			slices.Sort(sorted)
			if !slices.Equal(sorted, slices.Compact(slices.Clone(sorted))) || !slices.Equal(sorted, want) {
				t.Errorf("%s, limit %d: %v, want each of %v once", name, limit, got, want)
			}
		}
	}
	f("every call", audit.CallQuery{}, func(audit.Record) bool { return true })
	f("server", audit.CallQuery{Server: "oddlynew"}, func(r audit.Record) bool { return r.Call.Server == "oddlynew" })
	f("tenant", audit.CallQuery{Tenant: "globex"}, func(r audit.Record) bool { return r.Call.Tenant == "globex" })
	f("server of a tenant", audit.CallQuery{Server: "thegram", Tenant: "acme"}, func(r audit.Record) bool {
		return r.Call.Server == "thegram" && r.Call.Tenant == "acme"
	})
	f("source", audit.CallQuery{Source: "otlp:thegram/pod-b/node-2"}, func(r audit.Record) bool { return r.Call.Source == "otlp:thegram/pod-b/node-2" })
	f("source of a server and tenant", audit.CallQuery{Source: "otlp:thegram/pod-b/node-2", Server: "thegram", Tenant: "acme"}, func(r audit.Record) bool {
		return r.Call.Source == "otlp:thegram/pod-b/node-2" && r.Call.Server == "thegram" && r.Call.Tenant == "acme"
	})
	f("source and document", audit.CallQuery{Source: "calls:proxy/thegram/host:8080", Document: "doc-2.gram"}, func(r audit.Record) bool {
		return r.Call.Source == "calls:proxy/thegram/host:8080" && slices.Contains(r.Documents(), "doc-2.gram")
	})
	f("one instant", audit.CallQuery{Since: at(20), Until: at(20).Add(1)}, func(r audit.Record) bool { return r.Call.Time.Equal(at(20)) })
	f("no document, by server and time", audit.CallQuery{Server: "thegram", Since: at(35)}, func(r audit.Record) bool {
		return r.Call.Server == "thegram" && !r.Call.Time.Before(at(35))
	})
	// The call without a document comes back whole.
	p, err := s.Calls(ctx(t), audit.CallQuery{Since: at(7), Until: at(8)})
	if err != nil || len(p.Calls) != 1 || !reflect.DeepEqual(p.Calls[0], recs[7]) {
		t.Errorf("call 7 (no document): %+v, %v; want %+v", p.Calls, err, recs[7])
	}
}

func testWritesSession(t *testing.T, s audit.Store) {
	var ws []audit.Write
	for i := range 12 {
		w := write(id(i), 0, i, audit.StateDurable, "a.gram")
		w.Session = fmt.Sprintf("s-%d", i%3)
		ws = append(ws, w)
	}
	commit(t, s, audit.Results{Writes: ws})
	got := allWrites(t, s, audit.WriteQuery{Session: "s-2", Limit: 2})
	var want []audit.Write
	for _, w := range ws {
		if w.Session == "s-2" {
			want = append(want, w)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("writes of s-2 = %+v, want %+v", got, want)
	}
}

func testFailureCounts(t *testing.T, s audit.Store) {
	recs := []audit.Record{
		rec(1, 1, "a.gram"),
		failed(rec(2, 2, "a.gram"), "E_STORAGE", audit.ActionVerifyThenDecide),
		timedOut(rec(3, 3, "b.gram")),
		failed(rec(4, 4, "a.gram"), "E_ARGUMENT", audit.ActionFixInput),
		failed(rec(5, 5, "a.gram"), "E_ARGUMENT", audit.ActionFixInput),
		failed(rec(6, 6, "a.gram"), "E_ARGUMENT", audit.ActionFixInput),
	}
	recs[5].Call.Server = "oddlynew"
	appendCalls(t, s, recs...)
	f := func(q audit.CountQuery, want map[audit.RetryAction]int64) {
		t.Helper()
		got, err := s.FailureCounts(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("FailureCounts(%+v) = %v, want %v", q, got, want)
		}
	}
	f(audit.CountQuery{}, map[audit.RetryAction]int64{audit.ActionVerifyThenDecide: 2, audit.ActionFixInput: 3})
	f(audit.CountQuery{Since: at(3), Until: at(6)}, map[audit.RetryAction]int64{audit.ActionVerifyThenDecide: 1, audit.ActionFixInput: 2})
	f(audit.CountQuery{Server: "oddlynew"}, map[audit.RetryAction]int64{audit.ActionFixInput: 1})
	f(audit.CountQuery{Tenant: "globex"}, map[audit.RetryAction]int64{})
}

// testWriteCountsHours counts writes spread over days, with ranges that
// start and end inside hours, after state changes and a retention delete.
func testWriteCountsHours(t *testing.T, s audit.Store) {
	var ws []audit.Write
	for i := range 300 {
		w := write(fmt.Sprintf("c_%020x", 1000+i), 0, i*1000+i%7, audit.WriteStates[i%len(audit.WriteStates)], "a.gram")
		w.Server = []string{"thegram", "oddlynew"}[i%2]
		w.Tenant = []string{"acme", "globex", "acme"}[i%3]
		ws = append(ws, w)
	}
	commit(t, s, audit.Results{Writes: ws})
	// A third of them settle later: pending → durable, durable → unverified.
	var changed []audit.Write
	for i := 0; i < len(ws); i += 3 {
		w := ws[i]
		if w.State == audit.StatePending {
			w.State = audit.StateDurable
		} else if w.State == audit.StateDurable {
			w.State = audit.StateUnverified
		} else {
			continue
		}
		ws[i] = w
		changed = append(changed, w)
	}
	commit(t, s, audit.Results{Writes: changed})
	check := func(name string, q audit.CountQuery) {
		t.Helper()
		want := map[audit.WriteState]int64{}
		for _, w := range ws {
			if (q.Server == "" || w.Server == q.Server) && (q.Tenant == "" || w.Tenant == q.Tenant) &&
				(q.Since.IsZero() || !w.Time.Before(q.Since)) && (q.Until.IsZero() || w.Time.Before(q.Until)) {
				want[w.State]++
			}
		}
		got, err := s.WriteCounts(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		for st, n := range got {
			if n == 0 {
				delete(got, st)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: WriteCounts = %v, want %v", name, got, want)
		}
	}
	check("all", audit.CountQuery{})
	check("inside hours", audit.CountQuery{Since: at(1234), Until: at(250_777)})
	check("one partial hour", audit.CountQuery{Since: at(7000), Until: at(9000)})
	check("open end", audit.CountQuery{Since: at(33_333)})
	check("open start", audit.CountQuery{Until: at(66_666)})
	check("server and tenant", audit.CountQuery{Server: "oddlynew", Tenant: "acme", Since: at(5000), Until: at(200_000)})
	check("unknown tenant", audit.CountQuery{Tenant: "nobody"})
	if _, err := s.DeleteBefore(ctx(t), at(100_000)); err != nil {
		t.Fatal(err)
	}
	ws = slices.DeleteFunc(ws, func(w audit.Write) bool { return w.Time.Before(at(100_000)) })
	check("after retention", audit.CountQuery{})
	check("after retention, a range", audit.CountQuery{Since: at(90_000), Until: at(150_500)})
}

// testCallsSession: a session's calls among many other sessions calling in
// the same seconds (each minute holds every session), under a session name
// that two tenants use, paged, in a span, after retention deleted the
// oldest calls, and with calls of the session stored after that.
func testCallsSession(t *testing.T, s audit.Store) {
	var recs []audit.Record
	for i := range 240 {
		r := rec(i, 0)
		r.Call.Time = at(0).Add(time.Duration(i) * 250 * time.Millisecond) // four calls a second for a minute
		r.Call.Session = fmt.Sprintf("busy-%d", i%40)
		switch {
		case i%17 == 3:
			r.Call.Session = "s-x"
		case i%23 == 5:
			r.Call.Session, r.Call.Tenant = "s-x", "globex"
		case i%29 == 7:
			r.Call.Tenant = "globex"
		case i%31 == 11:
			r.Call.Session = ""
		}
		recs = append(recs, r)
	}
	// In three batches, the second out of time order.
	appendCalls(t, s, recs[:100]...)
	later := slices.Clone(recs[100:180])
	slices.Reverse(later)
	appendCalls(t, s, later...)
	appendCalls(t, s, recs[180:]...)
	check := func(stage string) {
		t.Helper()
		f := func(name string, q audit.CallQuery, keep func(c *audit.Call) bool) {
			t.Helper()
			var want []string
			for _, r := range recs {
				if keep(r.Call) && (q.Since.IsZero() || !r.Call.Time.Before(q.Since)) && (q.Until.IsZero() || r.Call.Time.Before(q.Until)) {
					want = append(want, r.Call.ID)
				}
			}
			if len(want) == 0 {
				t.Fatalf("%s, %s: the query matches nothing: a useless case", stage, name)
			}
			for _, limit := range []int{0, 1, 3, 7} {
				q.Limit = limit
				if got := allCalls(t, s, q); !reflect.DeepEqual(got, want) {
					t.Errorf("%s, %s, limit %d: %v, want %v", stage, name, limit, got, want)
				}
			}
		}
		f("both tenants", audit.CallQuery{Session: "s-x"}, func(c *audit.Call) bool { return c.Session == "s-x" })
		f("one tenant", audit.CallQuery{Session: "s-x", Tenant: "acme"}, func(c *audit.Call) bool {
			return c.Session == "s-x" && c.Tenant == "acme"
		})
		f("the other tenant", audit.CallQuery{Session: "s-x", Tenant: "globex"}, func(c *audit.Call) bool {
			return c.Session == "s-x" && c.Tenant == "globex"
		})
		f("a busy session", audit.CallQuery{Session: "busy-7"}, func(c *audit.Call) bool { return c.Session == "busy-7" })
		f("in a span", audit.CallQuery{Session: "s-x", Since: at(40), Until: at(55)}, func(c *audit.Call) bool {
			return c.Session == "s-x"
		})
		for _, q := range []audit.CallQuery{{Session: "s-x", Tenant: "initech"}, {Session: "s-"}, {Session: "s-xx"}} {
			if got := allCalls(t, s, q); len(got) != 0 {
				t.Errorf("%s, %+v: %v, want none", stage, q, got)
			}
		}
	}
	check("stored")
	if _, err := s.DeleteBefore(ctx(t), at(30)); err != nil {
		t.Fatal(err)
	}
	recs = slices.DeleteFunc(recs, func(r audit.Record) bool { return r.Call.Time.Before(at(30)) })
	check("after retention")
	var more []audit.Record
	for i := 240; i < 260; i++ {
		r := rec(i, 0)
		r.Call.Time = at(70).Add(time.Duration(i) * 10 * time.Millisecond)
		r.Call.Session = "s-x"
		if i%2 == 0 {
			r.Call.Tenant = "globex"
		}
		more = append(more, r)
	}
	appendCalls(t, s, more...)
	recs = append(recs, more...)
	check("stored after retention")
}
