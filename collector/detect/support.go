package detect

import (
	"fmt"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

var sprintf = fmt.Sprintf

// hhmmss renders an event time for summaries.
func hhmmss(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") }

func keyPhrase(k string) string {
	if k == "" {
		return "no idempotency key"
	}
	return "key " + k
}

// bufCall is a call waiting in the reorder buffer.
type bufCall struct {
	c    *audit.Call
	seq  uint64
	seen *seenCall
}

// callHeap orders buffered calls by event time, then by arrival. It has
// its own push and pop rather than container/heap's, whose interface
// boxes every call.
type callHeap []bufCall

func (h callHeap) Len() int { return len(h) }
func (h callHeap) less(i, j int) bool {
	if !h[i].c.Time.Equal(h[j].c.Time) {
		return h[i].c.Time.Before(h[j].c.Time)
	}
	return h[i].seq < h[j].seq
}

func (h *callHeap) push(b bufCall) {
	*h = append(*h, b)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

// pop removes and returns the first call; the heap must not be empty.
func (h *callHeap) pop() bufCall {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q[last] = bufCall{}
	q = q[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(q) && q.less(l, small) {
			small = l
		}
		if r := l + 1; r < len(q) && q.less(r, small) {
			small = r
		}
		if small == i {
			break
		}
		q[i], q[small] = q[small], q[i]
		i = small
	}
	*h = q
	return top
}

// writeHeap orders pending writes by the end of their verification window.
type writeHeap []*writeRec

func (h writeHeap) Len() int           { return len(h) }
func (h writeHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h writeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
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

// dedupe recognizes a second observation of one exchange: the same
// (server, session, JSON-RPC id, request) within one second, or the same
// (trace_id, span_id).
type dedupe struct {
	byReq  map[string]*seenList
	bySpan map[string]*seenCall
	// The keys of both in the order their entries age, for sweep.
	reqQ  expiry[reqItem]
	spanQ expiry[string]
}

// reqItem is an item of dedupe.reqQ.
type reqItem struct {
	key string
	l   *seenList
}

// seenList holds the observations of one request.
type seenList struct {
	calls []*seenCall
	queue stamp // in dedupe.reqQ
}

type seenCall struct {
	c         *audit.Call
	processed bool
	// What the dialect read in the call, taken when it arrived so that the
	// reorder buffer need not keep its raw payloads.
	a dialect.Analysis
	// reqHash identifies the request for wasted-retry checks; set only for
	// calls refused for bad input or missing authority.
	reqHash string
}

func newDedupe() dedupe {
	return dedupe{byReq: map[string]*seenList{}, bySpan: map[string]*seenCall{}}
}

// reqKey is the request part of the duplicate key; calls built without a
// fingerprint (by hand, in tests) get one here.
func reqKey(c *audit.Call) string {
	if c.Fingerprint == "" {
		c.Fingerprint = audit.Fingerprint(c.Server, c.Session, c.RPCID, c.Tool, canon.Bytes(c.Arguments))
	}
	return c.Fingerprint
}

// seen returns nil when c duplicates a call already taken, else its entry.
// When the first observation saw no response and this one did, and the
// first is still waiting in the reorder buffer, the response is taken from
// this one.
func (d *dedupe) seen(c *audit.Call) (s, merged *seenCall) {
	var dup *seenCall
	if c.TraceID != "" && c.SpanID != "" {
		dup = d.bySpan[c.TraceID+c.SpanID]
	}
	rk := reqKey(c)
	l := d.byReq[rk]
	if dup == nil && l != nil {
		for _, s := range l.calls {
			dt := c.Time.Sub(s.c.Time)
			if dt < 0 {
				dt = -dt
			}
			if dt <= time.Second {
				dup = s
				break
			}
		}
	}
	if dup != nil {
		if !dup.processed && !dup.c.Responded && c.Responded {
			first := dup.c
			first.Responded, first.Result, first.Error, first.TransportError = true, c.Result, c.Error, ""
			// The arguments are the same request's; the first may have
			// forgotten its own.
			first.Arguments = c.Arguments
			if c.Duration > 0 {
				first.Duration = c.Duration
			}
			return nil, dup
		}
		return nil, nil
	}
	s = &seenCall{c: c}
	if l == nil {
		l = &seenList{}
		d.byReq[rk] = l
	}
	l.calls = append(l.calls, s)
	if l.queue.needs(c.Time) {
		d.reqQ.push(reqItem{rk, l}, l.queue.set(c.Time))
	}
	if c.TraceID != "" && c.SpanID != "" {
		k := c.TraceID + c.SpanID
		d.bySpan[k] = s
		d.spanQ.push(k, c.Time)
	}
	return s, nil
}

// sweep forgets observations older than horizon. Like the detector's
// sweep, it visits only the entries that may hold one.
func (d *dedupe) sweep(horizon time.Time) {
	for {
		it, at, ok := d.reqQ.popBefore(horizon)
		if !ok {
			break
		}
		l := it.l
		if !l.queue.is(at) {
			continue
		}
		kept, first := keepSince(l.calls, horizon, func(s *seenCall) time.Time { return s.c.Time })
		l.calls = kept
		if len(kept) == 0 {
			l.queue.queued = false
			delete(d.byReq, it.key)
		} else {
			// Queued again after the horizon: out of this sweep.
			d.reqQ.push(it, l.queue.set(first))
		}
	}
	for {
		k, _, ok := d.spanQ.popBefore(horizon)
		if !ok {
			break
		}
		// A span is stored once, at its call's time; a later one under the
		// same ids, stored after this one was dropped, is queued apart.
		if s := d.bySpan[k]; s != nil && s.c.Time.Before(horizon) {
			delete(d.bySpan, k)
		}
	}
}

// Stats counts what the detector processed, for summaries.
type Stats struct {
	Calls      int64
	Outcomes   map[audit.Outcome]int64
	Writes     map[audit.WriteState]int64 // current state of every write
	Failures   map[audit.RetryAction]map[string]int64
	Findings   map[audit.Kind]int64
	Duplicates int64
	Late       int64
}

func newStats() Stats {
	return Stats{
		Outcomes: map[audit.Outcome]int64{},
		Writes:   map[audit.WriteState]int64{},
		Failures: map[audit.RetryAction]map[string]int64{},
		Findings: map[audit.Kind]int64{},
	}
}

func (s *Stats) call(r *audit.CallReport) {
	s.Calls++
	s.Outcomes[r.Outcome]++
	add := func(f *audit.Failure) {
		m := s.Failures[f.Action]
		if m == nil {
			m = map[string]int64{}
			s.Failures[f.Action] = m
		}
		m[f.Code]++
	}
	if r.Failure != nil {
		add(r.Failure)
	}
	for i := range r.OpFailures {
		add(&r.OpFailures[i])
	}
}

func (s *Stats) write(state, prev audit.WriteState) {
	if prev != "" {
		s.Writes[prev]--
	}
	s.Writes[state]++
}

// recentIDsKept is how many call ids the detector remembers to drop a call
// taken again: about 10 MiB.
const recentIDsKept = 200_000

// recentIDs remembers the last ids taken, first in first out.
type recentIDs struct {
	set  map[string]struct{}
	ring []string
	next int
}

func newRecentIDs(n int) recentIDs {
	return recentIDs{set: make(map[string]struct{}, 1024), ring: make([]string, n)}
}

// add remembers id; it returns false when id was already remembered. An
// empty id (a call built by hand) is never a duplicate.
func (r *recentIDs) add(id string) bool {
	if id == "" {
		return true
	}
	if _, ok := r.set[id]; ok {
		return false
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.set, old)
	}
	r.ring[r.next] = id
	r.next = (r.next + 1) % len(r.ring)
	r.set[id] = struct{}{}
	return true
}

// keepSince keeps, in place and in order, the items whose time is not
// before horizon, and returns them with the earliest of their times.
func keepSince[T any](items []T, horizon time.Time, timeOf func(T) time.Time) (kept []T, first time.Time) {
	kept = items[:0]
	for _, it := range items {
		if t := timeOf(it); !t.Before(horizon) {
			kept = append(kept, it)
			if len(kept) == 1 || t.Before(first) {
				first = t
			}
		}
	}
	clear(items[len(kept):])
	return kept, first
}
