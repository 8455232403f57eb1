package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestStatus_PrintsWhatHoldsAServerBack: `mcpaudit status` says which
// source a server's calls wait for when it is far behind the server's
// other sources (an exporter that lags, or a clock that is slow), with the
// calls waiting and both lags; a source a few seconds behind, or a
// partition with one source, gets no such line. Found from outside: a pod
// whose clock was 2 hours slow, there when thegram's partition was made,
// held every thegram call for as long as it ran (792 waiting after 4
// minutes), and nothing but the HELD BY and LAG columns told it.
func TestStatus_PrintsWhatHoldsAServerBack(t *testing.T) {
	now := time.Date(2026, 12, 4, 14, 27, 6, 0, time.UTC)
	wm := now.Add(-2 * time.Hour)
	lag := 2 * time.Hour.Seconds()
	src := func(name string, behind time.Duration, idle bool) api.SourceStatus {
		return api.SourceStatus{Name: name, LastEvent: now.Add(-behind), LagSeconds: behind.Seconds(), Idle: idle}
	}
	st := api.StatusResponse{Time: now, Partitions: []api.PartitionStatus{
		{Server: "thegram", Watermark: &wm, LagSeconds: &lag, Buffered: 792, Counts: api.Counts{Calls: 844}, HeldBy: "otlp:thegram/pod-minus-same", Sources: []api.SourceStatus{
			src("otlp:thegram/pod-minus-same", 2*time.Hour+2*time.Second, false),
			src("otlp:thegram/pod-lag", 17*time.Second, true),
			src("otlp:thegram/pod-a", 2*time.Second, false),
			src("otlp:thegram/pod-b", 3*time.Second, false),
		}},
		{Server: "oddlynew", Watermark: &wm, LagSeconds: &lag, Buffered: 13, HeldBy: "otlp:oddlynew/pod-lag", Sources: []api.SourceStatus{
			src("otlp:oddlynew/pod-lag", 22*time.Second, false),
			src("otlp:oddlynew/pod-b", 2*time.Second, false),
		}},
		{Server: "thegram-skew", Watermark: &wm, LagSeconds: &lag, Buffered: 1, HeldBy: "otlp:thegram-skew/pod-minus", Sources: []api.SourceStatus{
			src("otlp:thegram-skew/pod-minus", 2*time.Hour, false),
		}},
	}}
	var b bytes.Buffer
	printStatus(&b, st, false)
	out := b.String()
	want := "Held back: 792 calls of thegram wait for otlp:thegram/pod-minus-same, whose latest call is 2h0m2s behind the wall clock while the other sources of thegram are 2s behind: its exporter lags or its clock is slow"
	if !strings.Contains(out, want) {
		t.Errorf("status output lacks\n%s\ngot:\n%s", want, out)
	}
	if strings.Count(out, "Held back:") != 1 {
		t.Errorf("want one line of a server held back (not for a source 20 s behind, nor for a server with one source):\n%s", out)
	}
}
