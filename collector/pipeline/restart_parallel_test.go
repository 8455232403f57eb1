package pipeline_test

import (
	"testing"
	"time"
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
	// Down for 3 minutes: what each pod's calls of those minutes are, per
	// second, in the Collector's queue.
	queue := p.stopWithWrite(3 * time.Minute)
	p.clock.Add(3 * time.Minute)
	p.restart()
	// The consumer held back has the first 5 s of both pods, 35 s late.
	p.retry(queue, 35)
	p.settled(2*(30+5+180+35+30) + 2)
}
