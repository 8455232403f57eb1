package pipeline_test

import (
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
)

// pods is the traffic of the restart tests that a sender's queue brings
// back after an outage: two pods of thegram (pod-0, pod-1) deliver live,
// one harmless call a second each in a session of their own, to a run
// over one data directory on a clock of the test's.
type pods struct {
	t     *testing.T
	dir   string
	clock *testClock
	r     *run
	rpc   int
	// edit, when set, edits the pipeline's config of each start (restart).
	edit func(*pipeline.Config)
}

// newPods starts a run over a new data directory at wallStart.
func newPods(t *testing.T) *pods {
	p := &pods{t: t, dir: t.TempDir(), clock: newClock(wallStart)}
	p.r = openRun(t, p.dir, p.clock, nil, nil)
	return p
}

// restart starts a run again over the data directory.
func (p *pods) restart() {
	p.r = openRun(p.t, p.dir, p.clock, p.edit, nil)
}

// line is one harmless call of pod's session at at, under an RPC id of
// its own.
func (p *pods) line(pod string, at time.Time) []byte {
	p.rpc++
	return callLine("thegram", "s-"+pod, p.rpc, at)
}

// ingest delivers one request of pod.
func (p *pods) ingest(pod string, lines ...[]byte) {
	p.t.Helper()
	if _, err := p.r.ingest(batch(p.t, pod, lines...)); err != nil {
		p.t.Fatal(err)
	}
}

// live delivers n seconds of live traffic: each second, a call of each
// pod dated a second earlier; then the clock moves on a second.
func (p *pods) live(n int) {
	p.t.Helper()
	for range n {
		now := p.clock.Now()
		for _, pod := range []string{"pod-0", "pod-1"} {
			p.ingest(pod, p.line(pod, now.Add(-time.Second)))
		}
		p.clock.Add(time.Second)
	}
}

// podRequest is one request in a pod's sender's queue.
type podRequest struct {
	pod   string
	lines [][]byte
}

// queue returns what the pods' senders queue while the collector is down
// for down from stop: a request of each pod a second, in time order;
// pod-1's request of second 3 also carries read(at), when read is set (a
// read that settles a write before the stop).
func (p *pods) queue(stop time.Time, down time.Duration, read func(at time.Time) []byte) []podRequest {
	var q []podRequest
	for s := range int(down / time.Second) {
		at := stop.Add(time.Duration(s) * time.Second)
		for _, pod := range []string{"pod-0", "pod-1"} {
			lines := [][]byte{p.line(pod, at)}
			if pod == "pod-1" && s == 3 && read != nil {
				lines = append(lines, read(at))
			}
			q = append(q, podRequest{pod, lines})
		}
	}
	return q
}

// deliver delivers the requests of q in order.
func (p *pods) deliver(q []podRequest) {
	p.t.Helper()
	for _, r := range q {
		p.ingest(r.pod, r.lines...)
	}
}

// stopWithWrite delivers a write of pod-1's (session s-w, sync pending)
// dated 4m30s before now, its window (5 m) ending 30 s later, then 5 s more
// of live traffic, and stops the run. It returns what the pods' senders
// queue while the collector is down for down, in which pod-1's request of
// second 3 reads the write synced.
func (p *pods) stopWithWrite(down time.Duration) []podRequest {
	p.t.Helper()
	w := p.clock.Now().Add(-4*time.Minute - 30*time.Second)
	p.ingest("pod-1", pendingPatchLine("s-w", 900001, w, "team/x.gram"))
	p.live(5)
	p.r.stop()
	return p.queue(p.clock.Now(), down, func(at time.Time) []byte { return readSyncedLine("s-w", 900002, at, "team/x.gram") })
}

// retry delivers queue as an OpenTelemetry Collector's sending queue does
// after a restart: the first consumer whose backoff ends takes the rest of
// the queue at once; another, still backing off, brings the first 5 s
// (10 requests) behind seconds later, behind live traffic; then live
// traffic goes on for 30 s.
func (p *pods) retry(queue []podRequest, behind int) {
	p.t.Helper()
	held, rest := queue[:10], queue[10:]
	p.deliver(rest)
	p.live(behind)
	p.deliver(held)
	p.live(30)
}

// settled checks that no call came too late to be judged, stops the run,
// and checks that it made no finding and stored want calls. It returns
// thegram's status before the stop.
func (p *pods) settled(want int) detect.PartitionStatus {
	p.t.Helper()
	st := p.r.status()[detect.PartitionKey{Server: "thegram"}]
	p.t.Logf("after the restart: watermark %s, %d late, %d too late", st.Watermark.Format(time.TimeOnly), st.Late, st.TooLate)
	if st.TooLate != 0 {
		p.t.Errorf("%d calls of the backlog too late to be judged", st.TooLate)
	}
	o := p.r.stop()
	for _, f := range o.findings {
		p.t.Errorf("finding %s %s %v", f.Kind, f.Document, f.Calls)
	}
	if n := len(o.calls); n != want {
		p.t.Errorf("%d calls stored, want %d", n, want)
	}
	return st
}
