package api

import (
	"strings"
	"testing"
	"time"
)

// TestBehindLine (op20's D4): the line mcpaudit status prints and the page
// shows as the tooltip of "partitions behind" counts the partitions behind
// and names them with their lag, and says of the quiet partition with the
// largest lag that its lag is its last delivery's, not a backlog.
func TestBehindLine(t *testing.T) {
	wm := time.Date(2026, 12, 6, 9, 20, 0, 0, time.UTC)
	part := func(tenant, server string, lag float64, buffered, pending int, behind bool) PartitionStatus {
		return PartitionStatus{Tenant: tenant, Server: server, Watermark: &wm, LagSeconds: &lag, Buffered: buffered, PendingWrites: pending, FallenBehind: behind}
	}
	f := func(parts []PartitionStatus, want ...string) {
		t.Helper()
		line, ok := BehindLine(StatusResponse{Partitions: parts})
		if len(want) == 0 {
			if ok {
				t.Errorf("BehindLine(%d partitions) = %q, want none", len(parts), line)
			}
			return
		}
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("BehindLine: %q\nwant it to hold %q", line, w)
			}
		}
	}
	f(nil)
	f([]PartitionStatus{part("", "thegram-inc", 67.084, 0, 0, false), part("", "thegram-ex01", 13.166, 0, 0, false)},
		"Behind: none of 2 partitions:",
		"thegram-inc: nothing waits; its watermark is 1m7.084s behind the wall clock only because its last delivery came that long after its latest call",
		"not a backlog")
	f([]PartitionStatus{part("acme", "thegram", 91.5, 72, 0, true), part("", "quiet", 1, 0, 0, false)},
		"Behind: 1 of 2 partitions (acme/thegram 1m31.5s)", "quiet: nothing waits")
	f([]PartitionStatus{part("", "a", 20, 1, 0, true), part("", "b", 20, 1, 0, true), part("", "c", 20, 1, 0, true), part("", "d", 20, 1, 0, true)},
		"Behind: 4 of 4 partitions (a 20s, b 20s, c 20s, 1 more)")
}
