package api

import (
	"strings"
	"testing"
)

// TestStateFileLine: mcpaudit status says what serve's start found wrong
// with its state file: one set aside, with why and what was kept, and
// sources past max_sources not restored one by one (adv46).
func TestStateFileLine(t *testing.T) {
	f := func(sf *StateFileStatus, want ...string) {
		t.Helper()
		line, ok := StateFileLine(StatusResponse{StateFile: sf})
		if ok != (len(want) > 0) {
			t.Fatalf("%+v: told %v (%q)", sf, ok, line)
		}
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("%+v: line %q does not say %q", sf, line, w)
			}
		}
	}
	f(nil)
	f(&StateFileStatus{})
	f(&StateFileStatus{SetAside: "/d/partitions.json.bad-20261207T041500Z", Reason: "line 1, column 56 (byte 55), field partitions[0]: cut short", Kept: []string{"downtimes"}},
		"set aside as /d/partitions.json.bad-20261207T041500Z", "field partitions[0]", "its downtimes were kept", "judged again")
	f(&StateFileStatus{Reason: "permission denied"}, "could not be moved", "nothing of it was kept")
	f(&StateFileStatus{SourcesInFile: 100_010, SourcesToOverflow: 99_000, SourcesDropped: 10},
		"kept 100010 sources", "1000 were restored", "99000 hold their partition through its overflow source", "10 quiet ones were dropped")
}
