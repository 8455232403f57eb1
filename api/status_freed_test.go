package api_test

import (
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestAddFreed (px19): the counts of partitions freed as idle are added to
// the status's too_late (and too_late_freed) for the tenant and server
// asked, and to their sources' totals, beside a source's counts in a
// partition held now; other tenants' and servers' are not.
func TestAddFreed(t *testing.T) {
	at := time.Date(2026, 12, 6, 6, 0, 0, 0, time.UTC)
	live := []detect.PartitionStatus{{PartitionKey: detect.PartitionKey{Tenant: "a", Server: "thegram"},
		Counts:  detect.Counts{Calls: 10, TooLate: 1, TooLateFrom: at, TooLateTo: at},
		Sources: []detect.SourceStatus{{Name: "calls:r", Counts: detect.Counts{Calls: 10, TooLate: 1, TooLateFrom: at, TooLateTo: at}}}}}
	freed := []detect.PartitionStatus{
		{PartitionKey: detect.PartitionKey{Tenant: "a", Server: "thegram"}, Counts: detect.Counts{Calls: 5, TooLate: 2},
			Sources: []detect.SourceStatus{{Name: "calls:r", Counts: detect.Counts{Calls: 5, TooLate: 2, TooLateFrom: at.Add(-time.Hour), TooLateTo: at.Add(-time.Hour)}}}},
		{PartitionKey: detect.PartitionKey{Tenant: "a", Server: "oddlynew"}, Counts: detect.Counts{Calls: 3, TooLate: 3},
			Sources: []detect.SourceStatus{{Name: "calls:o", Counts: detect.Counts{Calls: 3, TooLate: 3, TooLateFrom: at, TooLateTo: at}}}},
		{PartitionKey: detect.PartitionKey{Tenant: "b", Server: "thegram"}, Counts: detect.Counts{Calls: 7, TooLate: 7},
			Sources: []detect.SourceStatus{{Name: "calls:b", Counts: detect.Counts{Calls: 7, TooLate: 7}}}},
	}
	f := func(tenant, server string, tooLate, tooLateFreed int64, sources ...string) {
		t.Helper()
		st := api.StatusFrom(live, 0, 0, tenant, server, at)
		api.AddFreed(&st, freed, tenant, server)
		var names []string
		for _, s := range st.Sources {
			names = append(names, s.Tenant+"/"+s.Name)
		}
		if st.TooLate != tooLate || st.TooLateFreed != tooLateFreed || !slices.Equal(names, sources) {
			t.Errorf("tenant %q server %q: too_late %d, too_late_freed %d, sources %v; want %d, %d, %v",
				tenant, server, st.TooLate, st.TooLateFreed, names, tooLate, tooLateFreed, sources)
		}
	}
	f("a", "thegram", 3, 2, "a/calls:r")
	f("a", "", 6, 5, "a/calls:r", "a/calls:o")
	f("b", "", 7, 7, "b/calls:b")
	f("", "", 13, 12, "a/calls:r", "a/calls:o", "b/calls:b")

	st := api.StatusFrom(live, 0, 0, "a", "thegram", at)
	api.AddFreed(&st, freed, "a", "thegram")
	r := st.Sources[0]
	if r.TooLate != 3 || r.Calls != 15 || r.TooLateFrom == nil || !r.TooLateFrom.Equal(at.Add(-time.Hour)) || !r.TooLateTo.Equal(at) || !slices.Equal(r.Servers, []string{"thegram"}) {
		t.Errorf("source calls:r with its freed partition's counts: %+v; want 15 calls, 3 too late from %s to %s, servers [thegram]", r, at.Add(-time.Hour), at)
	}
}
