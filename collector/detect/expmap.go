package detect

import "math"

// expMap is a map whose entries age out: each entry is queued at the
// earliest time it holds, and sweep visits only the entries queued before
// its horizon, never the whole map. A visit trims what the entry holds
// that is older than the horizon and says whether anything is left and the
// earliest time of what is left; the entry is then dropped or queued again.
//
// Values live behind pointers that stay valid while the entry is in the
// map, so that state can point at other state.
type expMap[K comparable, V any] struct {
	m map[K]*slot[V]
	q expiry[qitem[K, V]]
}

type slot[V any] struct {
	v     V
	stamp stamp
}

type qitem[K comparable, V any] struct {
	k K
	s *slot[V]
}

func newExpMap[K comparable, V any]() expMap[K, V] { return expMap[K, V]{m: map[K]*slot[V]{}} }

// get returns the value of k, or nil.
func (e *expMap[K, V]) get(k K) *V {
	if s := e.m[k]; s != nil {
		return &s.v
	}
	return nil
}

// at returns the value of k, created as the zero value when absent, and
// notes that it holds time t.
func (e *expMap[K, V]) at(k K, t etime) *V {
	s := e.m[k]
	if s == nil {
		s = &slot[V]{stamp: stamp{notQueued}}
		e.m[k] = s
	}
	if s.stamp.needs(t) {
		e.q.push(qitem[K, V]{k, s}, s.stamp.set(t))
	}
	return &s.v
}

// holds notes that the value of k, which must exist, holds time t.
func (e *expMap[K, V]) holds(k K, t etime) {
	if s := e.m[k]; s != nil && s.stamp.needs(t) {
		e.q.push(qitem[K, V]{k, s}, s.stamp.set(t))
	}
}

// len returns how many entries the map holds.
func (e *expMap[K, V]) len() int { return len(e.m) }

// sweep visits the entries queued before horizon. trim drops what v holds
// before horizon and returns whether v still holds anything, and the
// earliest time it holds.
func (e *expMap[K, V]) sweep(horizon etime, trim func(k K, v *V) (keep bool, first etime)) {
	var again []qitem[K, V]
	var at []etime
	for {
		it, when, ok := e.q.popBefore(horizon)
		if !ok {
			break
		}
		s := it.s
		if !s.stamp.is(when) {
			continue // dropped, or queued again since
		}
		s.stamp.unqueue()
		keep, first := trim(it.k, &s.v)
		if !keep {
			delete(e.m, it.k)
			continue
		}
		// Queued again after the loop: an entry whose earliest time is
		// still before the horizon (a pending write keeps it) must not be
		// popped again in this sweep.
		again = append(again, it)
		at = append(at, first)
	}
	for i, it := range again {
		e.q.push(it, it.s.stamp.set(at[i]))
	}
}

// expiry orders items by a time, so that a sweep pops those before its
// horizon. Items mostly come in time order: those go to a FIFO, which
// costs nothing to pop; the others (late calls, entries queued again at an
// old time) go to a min-heap beside it. An item may be queued more than
// once; its owner tells a stale place from the current one (stamp).
type expiry[T any] struct {
	fifo []queued[T] // in time order from head
	head int
	late []queued[T] // a min-heap by time
}

type queued[T any] struct {
	at   etime
	item T
}

// push queues item at time at.
func (e *expiry[T]) push(item T, at etime) {
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
func (e *expiry[T]) popBefore(horizon etime) (item T, at etime, ok bool) {
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

// Len returns how many items are queued, stale ones included.
func (e *expiry[T]) Len() int { return len(e.fifo) - e.head + len(e.late) }

// stamp is the time an entry is queued at in its expiry, notQueued when
// it is not: 8 bytes where a time and a flag took 16, in every entry of
// every map.
type stamp struct {
	at etime
}

// notQueued is no event time: etimeOf pins the earliest to one above it.
const notQueued etime = math.MinInt64

// needs reports whether storing time t in the entry needs it queued (again):
// it is not queued, or only at a later time.
func (s *stamp) needs(t etime) bool { return s.at == notQueued || t.Before(s.at) }

// set records that the entry is queued at t, and returns t.
func (s *stamp) set(t etime) etime {
	s.at = t
	return t
}

// unqueue records that the entry is not queued.
func (s *stamp) unqueue() { s.at = notQueued }

// is reports whether an item popped with time at is the entry's current
// place in the queue; other places are stale.
func (s *stamp) is(at etime) bool { return s.at != notQueued && s.at.Equal(at) }

// keepSince keeps, in place and in order, the items whose time is not
// before horizon, and returns them with the earliest of their times.
func keepSince[T any](items []T, horizon etime, timeOf func(T) etime) (kept []T, first etime) {
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
