package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestStatus_PrintsNoWatermark: a partition with calls waiting and no
// watermark yet (a new server in its detect.join_wait) is told in words,
// not only by "-" in the WATERMARK and LAG columns; one with a watermark,
// or with nothing waiting, gets no such line. Found from outside: a
// second server's first status row read "thegram  -  -  3 ... HELD BY
// otlp:thegram/pod-a" with no reason given.
func TestStatus_PrintsNoWatermark(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 23, 40, 0, time.UTC)
	wm := now.Add(-37 * time.Second)
	lag := now.Sub(wm).Seconds()
	show := func(parts ...api.PartitionStatus) string {
		var b bytes.Buffer
		printStatus(&b, api.StatusResponse{Time: now, Partitions: parts}, false)
		return b.String()
	}
	joining := api.PartitionStatus{Server: "thegram", Buffered: 3, HeldBy: "otlp:thegram/pod-a/node-1", Sources: []api.SourceStatus{}}
	judging := api.PartitionStatus{Server: "oddlynew", Watermark: &wm, LagSeconds: &lag, Buffered: 1, Sources: []api.SourceStatus{}}
	out := show(judging, joining)
	want := "No watermark yet: 3 calls of thegram wait until it has one; a server seen for the first time waits detect.join_wait"
	if !strings.Contains(out, want) {
		t.Errorf("status output lacks\n%s\ngot:\n%s", want, out)
	}
	if strings.Count(out, "No watermark yet") != 1 {
		t.Errorf("want one line, for thegram alone:\n%s", out)
	}
	joining.Tenant, joining.Buffered = "acme", 1
	if want := "No watermark yet: 1 call of acme/thegram waits until"; !strings.Contains(show(joining), want) {
		t.Errorf("status output lacks %q:\n%s", want, show(joining))
	}
	joining.Buffered = 0
	if out := show(joining, judging); strings.Contains(out, "No watermark yet") {
		t.Errorf("a no-watermark line with nothing waiting:\n%s", out)
	}
}
