package pipeline_test

import (
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_BacklogRetriedInParallel is a restart as an OpenTelemetry
// Collector with a persistent sending queue delivers it (found from
// outside, docs/detection.md "Live delivery, checked from outside"): the
// queue has several consumers, each retrying its own request with its own
// backoff (up to 30 s ± 50 %). When the collector listens again, the
// first consumer whose backoff ends takes the rest of the queue, minutes of
// backlog of every source, in seconds; another, still waiting, brings the
// oldest request, taken when the collector stopped, half a minute later.
// Here two pods of thegram deliver live; the collector is down for 3
// minutes; after the restart the backlog comes at once but for its first
// 5 s, which come 35 s later, behind 35 s of live traffic. A write
// (sync pending) before the stop is read synced in those first 5 s.
//
// Without a hold of the restored partition, the backlog took its
// watermark 3 minutes on, the write's window closed without the read (a
// false unverified_write), and the held request was too late to be judged.
func TestRestart_BacklogRetriedInParallel(t *testing.T) {
	p := newPods(t)
	p.live(30)
	// Written 4m30s before the stop: its window (5 m) ends 30 s after it.
	stop := p.clock.Now()
	w := stop.Add(-4*time.Minute - 30*time.Second)
	p.ingest("pod-1", pendingPatchLine("s-w", 900001, w, "team/x.gram"))
	p.live(5)
	p.r.stop()
	// Down for 3 minutes: what each pod's calls of those minutes are, per
	// second, in the Collector's queue.
	queue := p.queue(p.clock.Now(), 3*time.Minute, func(at time.Time) []byte { return readSyncedLine("s-w", 900002, at, "team/x.gram") })
	p.clock.Add(3 * time.Minute)
	p.restart()
	// The consumer held back has the first 5 s of both pods.
	held, rest := queue[:10], queue[10:]
	p.deliver(rest)
	p.live(35)
	p.deliver(held)
	p.live(30)
	st := p.r.status()[detect.PartitionKey{Server: "thegram"}]
	t.Logf("after the restart: watermark %s, %d late, %d too late", st.Watermark.Format(time.TimeOnly), st.Late, st.TooLate)
	if st.TooLate != 0 {
		t.Errorf("%d calls of the backlog too late to be judged", st.TooLate)
	}
	o := p.r.stop()
	for _, f := range o.findings {
		t.Errorf("finding %s %s %v", f.Kind, f.Document, f.Calls)
	}
	if n := len(o.calls); n != 2*(30+5+180+35+30)+2 {
		t.Errorf("%d calls stored, want %d", n, 2*(30+5+180+35+30)+2)
	}
}
