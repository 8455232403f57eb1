package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestStatus_CutsLongNames: a 300-character tenant (and server, source)
// is cut in the status tables as the page cuts names, so the tables stay
// on the screen; op21 (D5) found both tables pushed off it by a column
// sized to the whole name. --format json keeps the whole name.
func TestStatus_CutsLongNames(t *testing.T) {
	now := time.Date(2026, 12, 6, 13, 0, 0, 0, time.UTC)
	long := strings.Repeat("t", 300)
	wm := now.Add(-time.Second)
	lag := 1.0
	st := api.StatusResponse{Time: now,
		Partitions: []api.PartitionStatus{{Tenant: long, Server: "s" + long, Watermark: &wm, LagSeconds: &lag,
			Sources: []api.SourceStatus{{Name: "calls:" + long, LastEvent: wm}}}},
		Sources: []api.SourceTotals{{Tenant: long, Name: "calls:" + long, Servers: []string{"s" + long}}}}
	var b bytes.Buffer
	printStatus(&b, st, false)
	out := b.String()
	rows := 0
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "ttt") && !strings.HasPrefix(l, "calls:") {
			continue // prose, not a table row
		}
		rows++
		if n := len([]rune(l)); n > 250 {
			t.Errorf("a table row of %d characters: %.120s...", n, l)
		}
	}
	if rows != 3 {
		t.Errorf("%d table rows, want 3:\n%s", rows, out)
	}
	if !strings.Contains(out, strings.Repeat("t", nameShown-1)+"…") {
		t.Errorf("no tenant cut to %d characters:\n%s", nameShown, out)
	}
}
