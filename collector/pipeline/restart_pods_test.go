package pipeline_test

import (
	"testing"
	"time"
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
}

// newPods starts a run over a new data directory at wallStart.
func newPods(t *testing.T) *pods {
	p := &pods{t: t, dir: t.TempDir(), clock: newClock(wallStart)}
	p.r = openRun(t, p.dir, p.clock, nil, nil)
	return p
}

// restart starts a run again over the data directory.
func (p *pods) restart() {
	p.r = openRun(p.t, p.dir, p.clock, nil, nil)
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
