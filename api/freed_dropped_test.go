package api_test

import (
	"testing"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestAddFreed_DroppedServers (mem20, rev19p's A): the servers freed as
// idle whose counts the engine keeps together (past detect.FreedKept,
// under detect.OverflowServer) are in the tenant's too_late and
// too_late_freed, and freed_dropped says how many they are, also when one
// server is asked for: its calls too late may be among them.
func TestAddFreed_DroppedServers(t *testing.T) {
	freed := []detect.PartitionStatus{
		{PartitionKey: detect.PartitionKey{Tenant: "acme", Server: detect.OverflowServer}, Counts: detect.Counts{Calls: 9, TooLate: 5}, FreedDropped: 3,
			Sources: []detect.SourceStatus{{Name: "otlp:a", Idle: true, Counts: detect.Counts{Calls: 9, TooLate: 5}}}},
		{PartitionKey: detect.PartitionKey{Tenant: "acme", Server: "srv-1"}, Counts: detect.Counts{Calls: 4, TooLate: 2},
			Sources: []detect.SourceStatus{{Name: "otlp:b", Idle: true, Counts: detect.Counts{Calls: 4, TooLate: 2}}}},
		{PartitionKey: detect.PartitionKey{Tenant: "other", Server: "srv-1"}, Counts: detect.Counts{Calls: 7, TooLate: 7}},
	}
	f := func(tenant, server string, tooLate, dropped int64, sources int) {
		t.Helper()
		var out api.StatusResponse
		api.AddFreed(&out, freed, tenant, server)
		if out.TooLate != tooLate || out.TooLateFreed != tooLate || out.FreedDropped != dropped || len(out.Sources) != sources {
			t.Errorf("tenant %q server %q: too_late %d, too_late_freed %d, freed_dropped %d, %d sources; want %d, %d, %d, %d",
				tenant, server, out.TooLate, out.TooLateFreed, out.FreedDropped, len(out.Sources), tooLate, tooLate, dropped, sources)
		}
	}
	f("acme", "", 7, 3, 2)
	f("acme", "srv-1", 2, 3, 1)
	f("acme", detect.OverflowServer, 5, 3, 1)
	f("other", "", 7, 0, 0)
	f("", "", 14, 3, 2)
}
