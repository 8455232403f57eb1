package detect

import (
	"hash/maphash"
	"time"
)

// spanSeed hashes span identities apart from request fingerprints.
var spanSeed = maphash.MakeSeed()

// observed remembers every observation a partition took, compactly, for
// as long as another observation of the same exchange may still come and
// be judged: a call of that time is judged while it is within the allowed
// lateness behind the watermark. dedupe holds observations in full only
// for a few seconds behind the watermark (what merging two observations
// of a call still waiting needs); past that, this index is what makes a
// second observation that comes later (another observer's exporter that
// stalled, a 30 s timeout exported at its end, an upload sent again) a
// duplicate and not a call of its own.
//
// Each observation is a 64-bit hash of its duplicate key (server, session,
// JSON-RPC id, request) and, when it has one, of its (trace_id, span_id),
// with its time, filed by the second of event time it is dated. A
// collision (one in 2^64 per pair) would drop a call. Each entry costs
// about 25 bytes: at 10,000 calls a second and the default allowance of two
// minutes, about 30 MiB, 60 with span ids.
type observed struct {
	seconds map[int64]*second
	// from is the earliest second that may hold entries.
	from int64
	// free holds seconds forgotten, for add to fill again: a partition
	// that takes about a call a second made one per call.
	free []*second
}

// maxFreeSeconds bounds observed.free.
const maxFreeSeconds = 64

// second is the observations dated in one second. Most seconds of a
// partition hold a few: those are a short list, scanned, which costs one
// allocation for the second; past secondList entries they move to a map.
type second struct {
	list   []obs
	inline [secondList]obs
	m      map[uint64]etime
}

// secondList is how many observations a second lists before a map.
const secondList = 4

type obs struct {
	h  uint64
	at etime
}

// get returns the time remembered under h in the second.
func (s *second) get(h uint64) (etime, bool) {
	if s.m != nil {
		t, ok := s.m[h]
		return t, ok
	}
	for _, o := range s.list {
		if o.h == h {
			return o.at, true
		}
	}
	return 0, false
}

func newObserved() *observed { return &observed{seconds: map[int64]*second{}} }

// add remembers an observation dated at under hash h (the first of equal
// hashes in a second stays: a later one is within a second of it).
func (o *observed) add(h uint64, at etime) {
	sec := int64(at) / 1e9
	s := o.seconds[sec]
	if s == nil {
		if n := len(o.free); n > 0 {
			s = o.free[n-1]
			o.free = o.free[:n-1]
			*s = second{}
		} else {
			s = &second{}
		}
		s.list = s.inline[:0]
		o.seconds[sec] = s
		if len(o.seconds) == 1 || sec < o.from {
			o.from = sec
		}
	}
	if _, ok := s.get(h); ok {
		return
	}
	if s.m == nil && len(s.list) < secondList {
		s.list = append(s.list, obs{h, at})
		return
	}
	if s.m == nil {
		s.m = make(map[uint64]etime, 2*secondList)
		for _, x := range s.list {
			s.m[x.h] = x.at
		}
		s.list = nil
	}
	s.m[h] = at
}

// near reports whether an observation under hash h is remembered within a
// second of at.
func (o *observed) near(h uint64, at etime) bool {
	sec := int64(at) / 1e9
	for i := sec - 1; i <= sec+1; i++ {
		s := o.seconds[i]
		if s == nil {
			continue
		}
		if t, ok := s.get(h); ok {
			dt := at.Sub(t)
			if dt < 0 {
				dt = -dt
			}
			if dt <= time.Second {
				return true
			}
		}
	}
	return false
}

// forget drops the observations dated in seconds wholly before before.
func (o *observed) forget(before etime) {
	end := int64(before)/1e9 - 1
	if len(o.seconds) == 0 || end < o.from {
		return
	}
	if end-o.from > int64(len(o.seconds)) {
		// Sparse (a gap in time): visit the seconds held, not the range.
		for sec, s := range o.seconds {
			if sec <= end {
				o.drop(sec, s)
			}
		}
	} else {
		for sec := o.from; sec <= end; sec++ {
			if s := o.seconds[sec]; s != nil {
				o.drop(sec, s)
			}
		}
	}
	o.from = end + 1
}

// drop forgets second sec, s, and keeps s to be filled again: nothing
// else refers to a second.
func (o *observed) drop(sec int64, s *second) {
	delete(o.seconds, sec)
	if len(o.free) < maxFreeSeconds {
		o.free = append(o.free, s)
	}
}

// len returns how many observations are remembered.
func (o *observed) len() int {
	n := 0
	for _, s := range o.seconds {
		n += len(s.list) + len(s.m)
	}
	return n
}
