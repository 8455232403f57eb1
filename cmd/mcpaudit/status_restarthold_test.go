package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestStatus_PrintsRestartHold: `mcpaudit status` says which partitions
// hold their watermarks after a restart, until when and for how much
// longer, and how many calls wait in them; without a hold, or once it is
// over (held_until absent), it says nothing of it. Found from outside: for
// the ~3 minutes after a restart the status showed calls waiting and
// "judged: no" with no reason, the hold told only by one start-up log
// line.
func TestStatus_PrintsRestartHold(t *testing.T) {
	now := time.Date(2026, 12, 4, 15, 43, 32, 400_000_000, time.UTC)
	until := time.Date(2026, 12, 4, 15, 44, 10, 0, time.UTC)
	at := until.Add(-3*time.Minute - 12*time.Second)
	wm := at
	lag := now.Sub(wm).Seconds()
	part := func(tenant, server string, buffered int, held bool) api.PartitionStatus {
		p := api.PartitionStatus{Tenant: tenant, Server: server, Watermark: &wm, LagSeconds: &lag, Buffered: buffered, Sources: []api.SourceStatus{}}
		if held {
			p.HeldUntil, p.HeldAt = &until, &at
		}
		return p
	}
	show := func(parts ...api.PartitionStatus) string {
		var b bytes.Buffer
		printStatus(&b, api.StatusResponse{Time: now, Partitions: parts}, false)
		return b.String()
	}
	out := show(part("", "thegram", 120, true), part("acme", "oddlynew", 13, true), part("", "quiet", 0, false))
	want := "Restart hold: 2 partitions (thegram, acme/oddlynew) wait until 15:44:10Z (38 s more) for the backlogs of senders that kept their calls through the downtime (calls a sender dropped never come); the 133 calls waiting there are judged in time order once the hold ends"
	if !strings.Contains(out, want) || !strings.Contains(out, "serve.pipeline.restart_grace_max") {
		t.Errorf("status output lacks\n%s\n(and serve.pipeline.restart_grace_max); got:\n%s", want, out)
	}
	if strings.Count(out, "Restart hold:") != 1 {
		t.Errorf("want one restart hold line:\n%s", out)
	}
	out = show(part("", "thegram", 1, true))
	if want := "Restart hold: 1 partition (thegram) waits"; !strings.Contains(out, want) {
		t.Errorf("status output lacks %q:\n%s", want, out)
	}
	var many []api.PartitionStatus
	for i := range 7 {
		many = append(many, part("", fmt.Sprintf("s%d", i), 1, true))
	}
	if want := "Restart hold: 7 partitions (s0, s1, s2, s3, s4, 2 more) wait"; !strings.Contains(show(many...), want) {
		t.Errorf("status output lacks %q:\n%s", want, show(many...))
	}
	// The hold over: held_until is absent.
	if out := show(part("", "thegram", 120, false), part("", "quiet", 0, false)); strings.Contains(out, "Restart hold") {
		t.Errorf("a restart hold line without a hold:\n%s", out)
	}
}
