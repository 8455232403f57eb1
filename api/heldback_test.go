package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestHeldBack_IdleSlowClock: an idle source that still holds its
// partition at the lag it showed (a slow clock) is named with that lag and
// when its hold ends, not with the age of its latest call, which grows,
// and also while every other source is idle; with no call waiting there is
// no line.
func TestHeldBack_IdleSlowClock(t *testing.T) {
	now := time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC)
	lag, until := (3 * time.Minute).Seconds(), now.Add(10*time.Minute)
	p := api.PartitionStatus{Tenant: "acme", Server: "thegram", Buffered: 45, HeldBy: "pod-b", Sources: []api.SourceStatus{
		{Name: "pod-b", LagSeconds: (8 * time.Minute).Seconds(), Idle: true, HoldLagSeconds: &lag, HoldUntil: &until},
		{Name: "pod-a", LagSeconds: 20, Idle: true},
	}}
	line, ok := api.HeldBack(p)
	for _, want := range []string{"45 calls of acme/thegram wait for pod-b, idle", "the newest call of each delivery came 3m0s behind the wall clock, the calls before it in a delivery further behind", "until 23:10:00Z"} {
		if !ok || !strings.Contains(line, want) {
			t.Errorf("HeldBack = %q, %v; want a line with %q", line, ok, want)
		}
	}
	if strings.Contains(line, "8m0s") {
		t.Errorf("HeldBack names the age of pod-b's latest call, not its hold: %q", line)
	}
	p.Buffered = 0
	if line, ok := api.HeldBack(p); ok {
		t.Errorf("no call waits, yet HeldBack = %q", line)
	}
}

// TestStatusLines_OneCall: one waiting call is "1 call ... waits", not
// "1 calls ... wait" (seen by an operator on the page and in mcpaudit
// status with one call held back by a slow pod).
func TestStatusLines_OneCall(t *testing.T) {
	now := time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC)
	lag, until := (90 * time.Second).Seconds(), now.Add(10*time.Minute)
	f := func(buffered int, want string) {
		t.Helper()
		idle := api.PartitionStatus{Server: "thegram", Buffered: buffered, HeldBy: "pod-b", Sources: []api.SourceStatus{
			{Name: "pod-b", LagSeconds: 120, Idle: true, HoldLagSeconds: &lag, HoldUntil: &until},
		}}
		behind := api.PartitionStatus{Server: "thegram", Buffered: buffered, HeldBy: "pod-b", Sources: []api.SourceStatus{
			{Name: "pod-b", LagSeconds: 120},
			{Name: "pod-a", LagSeconds: 1},
		}}
		held := api.StatusResponse{Time: now, Partitions: []api.PartitionStatus{{Server: "thegram", Buffered: buffered, HeldUntil: &until}}}
		for _, line := range []func() (string, bool){
			func() (string, bool) { return api.HeldBack(idle) },
			func() (string, bool) { return api.HeldBack(behind) },
			func() (string, bool) { return api.RestartHold(held) },
		} {
			if got, ok := line(); !ok || !strings.Contains(got, want) {
				t.Errorf("line = %q, %v; want it to hold %q", got, ok, want)
			}
		}
	}
	f(1, "1 call ")
	f(2, "2 calls ")
}
