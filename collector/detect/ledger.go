package detect

import (
	"container/heap"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// expire closes the verification windows that ended before t: their
// pending writes become unverified.
func (d *detector) expire(t time.Time) {
	for d.deadlines.Len() > 0 && d.deadlines[0].deadline.Before(t) {
		w := heap.Pop(&d.deadlines).(*writeRec)
		if w.State != audit.StatePending {
			continue
		}
		d.setState(w, audit.StateUnverified, w.deadline)
		if w.follows != nil && w.follows.State == audit.StateUnverified {
			continue // the attempt it replays was reported
		}
		d.out.finding(&audit.Finding{
			Kind: audit.KindUnverifiedWrite, Server: w.Server, Tenant: w.Tenant,
			Document: w.Document, Key: w.Key, Session: w.Session, Time: w.Time,
			Calls: []string{w.CallID}, Reason: w.Reason, RetryAction: w.Action,
			Summary: sprintf("Nobody established whether the %s write to %s at %s is durable (%s) within %s.", w.Tool, firstNonEmpty(w.Document, "a new document"), hhmmss(w.Time), w.Reason, d.cfg.VerifyWindow),
		})
	}
}

// setState moves a write to a new state and tells the sinks.
func (d *detector) setState(w *writeRec, s audit.WriteState, t time.Time) {
	prev := w.State
	if prev == s {
		return
	}
	w.State, w.StateTime = s, t
	if s != audit.StateUnverified && s != audit.StatePending {
		w.Reason = ""
	}
	if w.index >= 0 && s.Terminal() {
		heap.Remove(&d.deadlines, w.index)
	}
	d.out.write(w, prev)
}

// writeHeap orders pending writes by the end of their verification window.
type writeHeap []*writeRec

func (h writeHeap) Len() int           { return len(h) }
func (h writeHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h writeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

// Push and Pop are container/heap's; push is the detector's.
func (h *writeHeap) Push(x any) {
	w := x.(*writeRec)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *writeHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*h = old[:len(old)-1]
	return w
}
func (h *writeHeap) push(w *writeRec) { heap.Push(h, w) }

// emitter hands the detectors' output to the sinks and counts it.
type emitter struct {
	sinks []audit.Sink
	stats *Stats
}

func (o *emitter) call(r *audit.Record) {
	o.stats.call(r)
	for _, s := range o.sinks {
		s.Call(r)
	}
}

func (o *emitter) write(w *writeRec, prev audit.WriteState) {
	o.stats.write(w.State, prev)
	for _, s := range o.sinks {
		s.Write(&w.Write, prev)
	}
}

func (o *emitter) finding(f *audit.Finding) {
	f.Severity = f.Kind.Severity()
	o.stats.Findings[f.Kind]++
	for _, s := range o.sinks {
		s.Finding(f)
	}
}
