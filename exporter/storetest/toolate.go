package storetest

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// testTooLate checks the calls committed as too late to be judged
// (audit.Results.TooLate): kept with the commit that names them, once
// however often named, read back by time and tenant to the nanosecond,
// and deleted with their calls by retention (uncounted), per tenant too.
// A store that keeps none says so (audit.ErrUnsupported) and is skipped.
func testTooLate(t *testing.T, s audit.Store) {
	if _, err := s.TooLateCalls(ctx(t), time.Time{}); errors.Is(err, audit.ErrUnsupported) {
		t.Skipf("SKIPPING: this store does not keep the calls too late: %v", err)
	}
	appendCalls(t, s, rec(1, 10, "a.gram"), rec(2, 20, "a.gram"), withTenant(rec(3, 30, "a.gram"), "globex"), withTenant(rec(4, 40, "a.gram"), ""))
	refs := []audit.CallRef{
		{Tenant: "acme", ID: id(1), Time: at(10)},
		{Tenant: "globex", ID: id(3), Time: at(30)},
		{Tenant: "", ID: id(4), Time: at(40)},
	}
	commit(t, s, audit.Results{TooLate: refs[:2], Watermark: at(50)})
	// Named again (a commit retried) and with another: each kept once.
	commit(t, s, audit.Results{TooLate: refs, Watermark: at(60)})
	if wm, err := s.Watermark(ctx(t)); err != nil || !wm.Equal(at(60)) {
		t.Fatalf("Watermark = %v, %v; want %v", wm, err, at(60))
	}
	read := func(since time.Time) []audit.CallRef {
		t.Helper()
		got, err := s.TooLateCalls(ctx(t), since)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range got {
			if c.Time.Location() != time.UTC {
				t.Errorf("call %s too late at %v: not UTC", c.ID, c.Time)
			}
		}
		slices.SortFunc(got, func(a, b audit.CallRef) int { return a.Time.Compare(b.Time) })
		return got
	}
	tc, ok := s.(audit.TooLateCounter)
	if !ok {
		t.Fatalf("%T does not implement audit.TooLateCounter", s)
	}
	// counted checks CountTooLate against the references the store holds,
	// by tenant, the empty tenant included.
	counted := func(what string, all []audit.CallRef) {
		t.Helper()
		want := map[string]int64{}
		for _, r := range all {
			want[r.Tenant]++
		}
		got, err := tc.CountTooLate(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: CountTooLate = %v, want %v", what, got, want)
		}
	}
	same := func(what string, got, want []audit.CallRef) {
		t.Helper()
		eq := slices.EqualFunc(got, want, func(a, b audit.CallRef) bool {
			return a.Tenant == b.Tenant && a.ID == b.ID && a.Time.Equal(b.Time)
		})
		if !eq {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	same("all", read(time.Time{}), refs)
	counted("all", refs)
	same("since the second", read(at(30)), refs[1:])
	same("since after the last", read(at(41)), nil)
	// Retention deletes them with their calls, and counts only the calls.
	n, err := s.DeleteBefore(ctx(t), at(20))
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("DeleteBefore removed %d rows, want 1 (the call at 10; its reference uncounted)", n)
	}
	same("after DeleteBefore", read(time.Time{}), refs[1:])
	counted("after DeleteBefore", refs[1:])
	// Per tenant: globex's goes, the others stay.
	if _, err := s.DeleteTenantBefore(ctx(t), "globex", at(35)); err != nil {
		t.Fatal(err)
	}
	same("after globex's retention", read(time.Time{}), refs[2:])
	counted("after globex's retention", refs[2:])
	// Kept for its tenant: a retention that keeps "" leaves it.
	if _, err := s.DeleteBefore(ctx(t), at(45), ""); err != nil {
		t.Fatal(err)
	}
	same("after a retention keeping the empty tenant", read(time.Time{}), refs[2:])
	if _, err := s.DeleteBefore(ctx(t), at(45)); err != nil {
		t.Fatal(err)
	}
	if got := read(time.Time{}); len(got) != 0 {
		t.Errorf("after every call went: %s left", refsString(got))
	}
	counted("after every call went", nil)
}

func refsString(rs []audit.CallRef) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.Tenant + "/" + r.ID + "@" + r.Time.String() + " ")
	}
	return b.String()
}
