package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// withTenant returns a copy of r (its call copied) for another tenant.
func withTenant(r audit.Record, tenant string) audit.Record {
	c := *r.Call
	c.Tenant = tenant
	r.Call = &c
	return r
}

// testTenantScoped checks that a call id is unique per tenant, not across
// tenants: tenant B posting the records tenant A posted gets them stored
// for B, with B's writes beside A's under the same call ids.
func testTenantScoped(t *testing.T, s audit.Store) {
	a := []audit.Record{rec(1, 1, "a.gram"), rec(2, 2, "a.gram"), rec(3, 3, "b.gram")}
	var b []audit.Record
	for _, r := range a {
		b = append(b, withTenant(r, "globex"))
	}
	if n := appendCalls(t, s, a...); n != 3 {
		t.Fatalf("acme's 3 calls: %d stored", n)
	}
	if n := appendCalls(t, s, b...); n != 3 {
		t.Fatalf("globex posting acme's records: %d stored, want 3", n)
	}
	if n := appendCalls(t, s, b...); n != 0 && n != 3 {
		t.Fatalf("globex again: %d, want 0 (or 3 from a store that cannot tell)", n)
	}
	if got := scan(t, s, time.Time{}); len(got) != 6 {
		t.Fatalf("stored %d calls, want 6 (3 per tenant): %v", len(got), callIDs(got))
	}
	for _, tc := range []struct {
		tenant string
		want   []audit.Record
	}{{"acme", a}, {"globex", b}} {
		p, err := s.Calls(ctx(t), audit.CallQuery{Tenant: tc.tenant, IDs: []string{id(1), id(2), id(3)}})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p.Calls, tc.want) {
			t.Errorf("calls of %s by id:\n got %+v\nwant %+v", tc.tenant, p.Calls, tc.want)
		}
		events, err := eventsOf(s.Timeline(ctx(t), audit.TimelineQuery{Tenant: tc.tenant, Document: "a.gram"}))
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != 2 {
			t.Errorf("timeline of a.gram for %s: %d events, want its 2 calls: %+v", tc.tenant, len(events), events)
		}
	}

	// The same write attempt (call id, seq) in two tenants: two writes.
	wa := write(id(1), 0, 1, audit.StateDurable, "a.gram")
	wb := wa
	wb.Tenant, wb.State = "globex", audit.StateUnverified
	commit(t, s, audit.Results{Writes: []audit.Write{wa, wb}})
	for _, tc := range []struct {
		tenant string
		want   audit.Write
	}{{"acme", wa}, {"globex", wb}} {
		got := allWrites(t, s, audit.WriteQuery{Tenant: tc.tenant})
		if len(got) != 1 || !reflect.DeepEqual(got[0], tc.want) {
			t.Errorf("writes of %s: %+v, want [%+v]", tc.tenant, got, tc.want)
		}
		counts, err := s.WriteCounts(ctx(t), audit.CountQuery{Tenant: tc.tenant})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[audit.WriteState]int64{tc.want.State: 1}; !reflect.DeepEqual(counts, want) {
			t.Errorf("write counts of %s: %v, want %v", tc.tenant, counts, want)
		}
		events, err := eventsOf(s.Timeline(ctx(t), audit.TimelineQuery{Tenant: tc.tenant, Document: "a.gram"}))
		if err != nil {
			t.Fatal(err)
		}
		var states []audit.WriteState
		for _, e := range events {
			if e.Type == audit.EventWrite {
				states = append(states, e.State)
			}
		}
		if !reflect.DeepEqual(states, []audit.WriteState{tc.want.State}) {
			t.Errorf("timeline writes of %s: %v, want [%s]", tc.tenant, states, tc.want.State)
		}
	}
}

// testDeleteTenants checks per-tenant retention: one tenant's rows go
// before its own cutoff, and the default cutoff spares the tenants kept.
func testDeleteTenants(t *testing.T, s audit.Store) {
	tenants := []string{"acme", "globex", ""}
	var recs []audit.Record
	var ws []audit.Write
	var fs []audit.Finding
	for i := range 10 {
		for _, tn := range tenants {
			r := withTenant(rec(i, i*10, "a.gram"), tn)
			recs = append(recs, r)
			w := write(id(i), 0, i*10, audit.StateDurable, "a.gram")
			w.Tenant = tn
			ws = append(ws, w)
			f := finding(audit.KindUnsafeRetry, i*10, "a.gram", id(i))
			f.Tenant = tn
			fs = append(fs, f)
		}
	}
	appendCalls(t, s, recs...)
	commit(t, s, audit.Results{Writes: ws, Findings: fs, Watermark: at(90)})
	left := func(name string, want map[string]int) {
		t.Helper()
		for _, tn := range tenants {
			calls, err := s.Calls(ctx(t), audit.CallQuery{Tenant: tn, Document: "a.gram", Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, r := range calls.Calls {
				if r.Call.Tenant == tn {
					n++
				}
			}
			nw := 0 // an empty tenant does not filter: count its own
			for _, w := range allWrites(t, s, audit.WriteQuery{Tenant: tn}) {
				if w.Tenant == tn {
					nw++
				}
			}
			nf := 0
			for _, f := range allFindings(t, s, audit.FindingQuery{Tenant: tn}) {
				if f.Tenant == tn {
					nf++
				}
			}
			if n != want[tn] || nw != want[tn] || nf != want[tn] {
				t.Errorf("%s: tenant %q keeps %d calls, %d writes, %d findings; want %d of each", name, tn, n, nw, nf, want[tn])
			}
		}
	}
	n, err := s.DeleteTenantBefore(ctx(t), "globex", at(50))
	if err != nil {
		t.Fatal(err)
	}
	if n != 15 {
		t.Errorf("DeleteTenantBefore(globex, 50s) deleted %d rows, want 15 (5 calls, 5 writes, 5 findings)", n)
	}
	left("globex cut at 50s", map[string]int{"acme": 10, "globex": 5, "": 10})
	n, err = s.DeleteBefore(ctx(t), at(70), "globex")
	if err != nil {
		t.Fatal(err)
	}
	if n != 42 {
		t.Errorf("DeleteBefore(70s, keep globex) deleted %d rows, want 42 (7 calls, writes and findings of acme and of \"\")", n)
	}
	left("the others cut at 70s", map[string]int{"acme": 3, "globex": 5, "": 3})
	if n, err := s.DeleteTenantBefore(ctx(t), "nobody", at(1000)); err != nil || n != 0 {
		t.Errorf("DeleteTenantBefore(unknown tenant) = %d, %v; want nothing", n, err)
	}
	if counts, err := s.WriteCounts(ctx(t), audit.CountQuery{}); err != nil || counts[audit.StateDurable] != 11 {
		t.Errorf("WriteCounts after retention = %v, %v; want 11 durable", counts, err)
	}
}
