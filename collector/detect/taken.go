package detect

import "hash/maphash"

// takenIDs remembers the ids of the calls a partition took, by the second
// of event time they are dated, for as long as a call of that time can
// still be judged (the allowed lateness behind the watermark): a call sent
// again within that time is dropped however many calls came between, and
// one sent again later is too late to be judged anyway. Each id costs
// about 16 bytes: at 10,000 calls a second and the default allowance of
// two minutes, about 20 MiB.
type takenIDs struct {
	seconds map[int64]map[uint64]struct{}
	// from is the earliest second that may hold ids.
	from int64
}

func newTakenIDs() *takenIDs { return &takenIDs{seconds: map[int64]map[uint64]struct{}{}} }

// add remembers the id of a call dated at; it returns false when it was
// already remembered. An empty id (a call built by hand) is never taken.
func (t *takenIDs) add(id string, at etime) bool {
	if id == "" {
		return true
	}
	sec := int64(at) / 1e9
	ids := t.seconds[sec]
	if ids == nil {
		ids = map[uint64]struct{}{}
		t.seconds[sec] = ids
		if len(t.seconds) == 1 || sec < t.from {
			t.from = sec
		}
	}
	h := maphash.String(ordSeed, id)
	if _, ok := ids[h]; ok {
		return false
	}
	ids[h] = struct{}{}
	return true
}

// forget drops the ids of calls dated in seconds wholly before before.
func (t *takenIDs) forget(before etime) {
	end := int64(before)/1e9 - 1
	if len(t.seconds) == 0 || end < t.from {
		return
	}
	if end-t.from > int64(len(t.seconds)) {
		// Sparse (a gap in time): visit the seconds held, not the range.
		for sec := range t.seconds {
			if sec <= end {
				delete(t.seconds, sec)
			}
		}
	} else {
		for sec := t.from; sec <= end; sec++ {
			delete(t.seconds, sec)
		}
	}
	t.from = end + 1
}

// len returns how many ids are remembered.
func (t *takenIDs) len() int {
	n := 0
	for _, ids := range t.seconds {
		n += len(ids)
	}
	return n
}
