package main

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestStatus_IdleSourceHolding: the sources table says when an idle
// source still holds its partition at the lag it delivered with (a slow
// clock, or one late post of calls minutes old), and until when. Such a
// source is exported as mcpaudit_pipeline_source_lag_seconds{state="active"}
// and fires McpAuditSourceLagging, whose runbook sends the reader to
// this table; before op25 it said only "idle" while nothing waited, so
// the alert and the table disagreed. An idle source holding nothing stays
// "idle".
func TestStatus_IdleSourceHolding(t *testing.T) {
	now := time.Date(2026, 12, 7, 1, 5, 30, 0, time.UTC)
	wm := now.Add(-325 * time.Second)
	lag, hold := 325.33, 325.33
	until := time.Date(2026, 12, 7, 1, 19, 34, 600_000_000, time.UTC)
	st := api.StatusResponse{Time: now, Judged: true, Partitions: []api.PartitionStatus{{
		Tenant: "acme", Server: "thegram", Watermark: &wm, LagSeconds: &lag,
		Sources: []api.SourceStatus{
			{Name: "calls:agent-pod-1", LastEvent: now.Add(-6 * time.Minute), LagSeconds: 360, Idle: true, HoldLagSeconds: &hold, HoldUntil: &until},
			{Name: "calls:agent-pod-2", LastEvent: now.Add(-8 * time.Minute), LagSeconds: 480, Idle: true},
		},
	}}}
	var b bytes.Buffer
	printStatus(&b, st, false)
	out := b.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^calls:agent-pod-1 +thegram +2026-12-07T00:59:30Z +6m0s +idle, holding at 5m25s until 2026-12-07T01:19:34Z$`),
		regexp.MustCompile(`(?m)^calls:agent-pod-2 +thegram +2026-12-07T00:57:30Z +8m0s +idle$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("status lacks a line matching %s:\n%s", want, out)
		}
	}
}
