package detect

import "time"

// boundMemo is a partition's latest bound (Engine.bound), kept while it
// holds, so that a delivery does not go over every source of its
// partition: with a thousand active sources that was 29 µs a call (2 µs
// with one; BenchmarkAdd_Sources). It is kept only when an active source
// holds the partition, no quiet one holds it at its lag, and every source
// counted is current (none may be found later to have a wrong clock).
// Then, until wall time until, only a change of a source can change the
// bound: an active source goes quiet no earlier than until, a quiet one
// not held only for being too far behind the watermark is held again no
// earlier, and a quiet one held but not holding (its clock ahead of the
// bound) holds less as the wall clock goes on. Each change of a source
// that may change the bound drops the memo (invalidate); a delivery by a
// counted source other than the one holding the partition only moves
// that source's clock forward, which leaves the earliest where it is
// (arrived).
type boundMemo struct {
	ok        bool
	seq       uint64
	at, until time.Time
	wm        time.Time
	h         *source
	ahead     bool
}

// valid reports whether the memo is the bound at wall.
func (m *boundMemo) valid(wall time.Time) bool {
	return m.ok && !wall.Before(m.at) && wall.Before(m.until)
}

// invalidate drops the memo: a source of the partition changed otherwise
// than by a delivery of a counted one.
func (m *boundMemo) invalidate() { m.ok = false }

// arrived keeps or drops the memos of the partitions source s feeds,
// through a delivery by s (wasCurrent: s was current before it): its
// clock is the same in all of them, unless the engine keeps one per
// partition.
func (e *Engine) arrived(s *source, wasCurrent bool) {
	for _, p := range s.parts {
		p.memo.arrived(e, s, wasCurrent)
	}
}

// arrived keeps the memo through a delivery by source s (wasCurrent: s
// was current before it), or drops it: s was not counted, holds the
// partition, or became current (another source may then be found to have
// a wrong clock).
func (m *boundMemo) arrived(e *Engine, s *source, wasCurrent bool) {
	if !m.ok {
		return
	}
	if s.counted != m.seq || s == m.h || s.current != wasCurrent {
		m.ok = false
		return
	}
	if s.max.Add(-e.cfg.Lateness).After(m.wm) {
		m.ahead = true
	}
}

// heldFrom returns, for source s of partition p, quiet at wall and not
// held (heldClock) only because its clock is further behind p's
// watermark than the allowed lateness, the wall time from which its clock
// taken to run with the wall clock at its lag comes within it, and
// whether there is one.
func (e *Engine) heldFrom(p *partition, s *source, wall time.Time) (time.Time, bool) {
	if p.wm.IsZero() || !e.holding(p, s, wall) {
		return time.Time{}, false
	}
	return p.wm.Add(-e.cfg.AllowedLateness + max(s.lag, 0)), true
}

// holding reports whether quiet source s's hold on partition p at its
// learned lag runs at wall (heldClock holds by it, or heldFrom, once the
// wall clock brings it within the allowed lateness): it delivered within
// MaxClockLag, and its hold has not ended.
func (e *Engine) holding(p *partition, s *source, wall time.Time) bool {
	return !s.spell.IsZero() && s.current && e.cfg.MaxClockLag > 0 && s.lag <= e.cfg.MaxClockLag &&
		e.holdNow(p, wall).Before(s.holdUntil)
}

// memoCheck, when set (tests), has every bound taken from a memo computed
// again, and is told of it: diff says what differs, empty when nothing.
var memoCheck func(k PartitionKey, wall time.Time, diff string)

func nameOf(s *source) string {
	if s == nil {
		return ""
	}
	return s.key.name
}
