package detect

import "time"

// expiry orders the keys of one correlation map by the earliest time their
// entry holds, so that a sweep visits only the entries that may have grown
// older than its horizon instead of the whole map.
//
// Calls are processed in time order, so keys mostly arrive in time order:
// those go to a FIFO, which costs nothing to pop. The others (late calls,
// entries queued again at an old time) go to a min-heap beside it.
//
// A key may be queued more than once (an entry touched by a late call is
// queued again, earlier); the extra visits that causes are harmless, since
// a visit does to an entry exactly what a sweep of the whole map would.
// What must never happen is an entry holding a time older than every
// queued time of its key: callers queue a key whenever they store a time
// earlier than the one it is queued at.
//
// Items carry the entry's state as well as its key, so that a sweep reaches
// the state without a map lookup; a sweep that drops an entry marks its
// state not queued, which makes any place left in the queue stale.
type expiry[T any] struct {
	fifo []queued[T] // in time order from head
	head int
	late []queued[T] // a min-heap by time
}

type queued[T any] struct {
	at   time.Time
	item T
}

// push queues item at time at.
func (e *expiry[T]) push(item T, at time.Time) {
	if e.head == len(e.fifo) || !at.Before(e.fifo[len(e.fifo)-1].at) {
		if e.head > 0 && e.head >= len(e.fifo)/2 {
			// Reuse the popped half rather than grow.
			n := copy(e.fifo, e.fifo[e.head:])
			clear(e.fifo[n:])
			e.fifo, e.head = e.fifo[:n], 0
		}
		e.fifo = append(e.fifo, queued[T]{at, item})
		return
	}
	e.late = append(e.late, queued[T]{at, item})
	for i := len(e.late) - 1; i > 0; {
		p := (i - 1) / 2
		if !e.late[i].at.Before(e.late[p].at) {
			break
		}
		e.late[i], e.late[p] = e.late[p], e.late[i]
		i = p
	}
}

// popBefore removes and returns the earliest item queued before horizon.
func (e *expiry[T]) popBefore(horizon time.Time) (item T, at time.Time, ok bool) {
	fromFIFO := e.head < len(e.fifo) && (len(e.late) == 0 || !e.late[0].at.Before(e.fifo[e.head].at))
	switch {
	case fromFIFO:
		q := e.fifo[e.head]
		if !q.at.Before(horizon) {
			return item, at, false
		}
		e.fifo[e.head] = queued[T]{}
		e.head++
		if e.head == len(e.fifo) {
			e.fifo, e.head = e.fifo[:0], 0
		}
		return q.item, q.at, true
	case len(e.late) > 0:
		q := e.late[0]
		if !q.at.Before(horizon) {
			return item, at, false
		}
		e.popLate()
		return q.item, q.at, true
	}
	return item, at, false
}

func (e *expiry[T]) popLate() {
	last := len(e.late) - 1
	e.late[0] = e.late[last]
	e.late[last] = queued[T]{}
	e.late = e.late[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(e.late) && e.late[l].at.Before(e.late[small].at) {
			small = l
		}
		if r := l + 1; r < len(e.late) && e.late[r].at.Before(e.late[small].at) {
			small = r
		}
		if small == i {
			return
		}
		e.late[i], e.late[small] = e.late[small], e.late[i]
		i = small
	}
}

// Len returns how many keys are queued, stale ones included.
func (e *expiry[T]) Len() int { return len(e.fifo) - e.head + len(e.late) }

// earliest returns the earliest of t and the times of ws.
func earliest(t time.Time, ws []*writeRec) time.Time {
	for _, w := range ws {
		if w.Time.Before(t) {
			t = w.Time
		}
	}
	return t
}

// stamp is the time an entry is queued at in its expiry.
type stamp struct {
	at     time.Time
	queued bool
}

// needs reports whether storing time t in the entry needs it queued (again):
// it is not queued, or only at a later time.
func (s *stamp) needs(t time.Time) bool { return !s.queued || t.Before(s.at) }

// set records that the entry is queued at t, and returns t.
func (s *stamp) set(t time.Time) time.Time {
	s.at, s.queued = t, true
	return t
}

// is reports whether a key popped with time at is the entry's current
// place in the queue; other places are stale.
func (s *stamp) is(at time.Time) bool { return s.queued && s.at.Equal(at) }

// list returns the creates of l; l may be nil.
func (l *createList) list() []*createRec {
	if l == nil {
		return nil
	}
	return l.recs
}
