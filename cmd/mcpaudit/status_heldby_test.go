package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestStatus_HeldByOnlyWhileCallsWait: the HELD BY column names the
// source a partition waits for only while calls wait in it. Found from
// outside: once every source was idle and nothing waited, the status
// still showed HELD BY otlp:thegram/pod-a/node-1.
func TestStatus_HeldByOnlyWhileCallsWait(t *testing.T) {
	now := time.Date(2026, 12, 5, 17, 40, 0, 0, time.UTC)
	wm := now.Add(-2 * time.Minute)
	lag := now.Sub(wm).Seconds()
	const src = "otlp:thegram/pod-a/node-1"
	row := func(buffered int) string {
		p := api.PartitionStatus{Server: "thegram", Watermark: &wm, LagSeconds: &lag, Buffered: buffered, HeldBy: src,
			Sources: []api.SourceStatus{{Name: src, LagSeconds: lag, Idle: buffered == 0}}}
		var b bytes.Buffer
		printStatus(&b, api.StatusResponse{Time: now, Partitions: []api.PartitionStatus{p}}, false)
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(l, "-  ") && strings.Contains(l, "thegram") && strings.Contains(l, wm.Format(time.RFC3339Nano)) && !strings.Contains(l, "idle") && !strings.Contains(l, "active") {
				return l
			}
		}
		t.Fatalf("no partition row in:\n%s", b.String())
		return ""
	}
	if l := row(5); !strings.HasSuffix(strings.TrimSpace(l), src) {
		t.Errorf("5 calls waiting: row %q does not end with HELD BY %s", l, src)
	}
	if l := row(0); strings.Contains(l, src) || !strings.HasSuffix(strings.TrimSpace(l), "-") {
		t.Errorf("nothing waiting: row %q names %s as holding it back", l, src)
	}
}
