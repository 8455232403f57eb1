package detect

import (
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// sweep forgets correlation state that no call can correlate with any
// more: older than the correlation window plus the allowed lateness, and
// reads older than the allowed lateness. Memory follows the open state,
// not the input.
func (d *detector) sweep() {
	if d.clock.Sub(d.lastSweep) < d.cfg.CorrelationWindow/8 && d.clock.Sub(d.lastSweep) < d.cfg.AllowedLateness {
		return
	}
	d.lastSweep = d.clock
	horizon := d.clock.Add(-d.cfg.horizon())
	d.docs.sweep(horizon, func(_ string, s *docState) (bool, time.Time) {
		first := s.last
		keep := func(w *writeRec) bool {
			if !w.Time.Before(horizon) || w.State == audit.StatePending {
				if w.Time.Before(first) {
					first = w.Time
				}
				return true
			}
			return false
		}
		s.writes = filter(s.writes, keep)
		s.uncertain = filter(s.uncertain, keep)
		s.proof = filter(s.proof, keep)
		return !s.last.Before(horizon) || len(s.writes) > 0 || len(s.proof) > 0, first
	})
	d.reads.sweep(d.clock.Add(-d.cfg.AllowedLateness-d.cfg.Lateness), func(_ string, rs *[]readRec) (bool, time.Time) {
		kept, first := keepSince(*rs, d.clock.Add(-d.cfg.AllowedLateness-d.cfg.Lateness), func(r readRec) time.Time { return r.at.t })
		*rs = kept
		return len(kept) > 0, first
	})
	d.keys.sweep(horizon, func(_ keyID, s *keyState) (bool, time.Time) {
		if s.last.Before(horizon) {
			return false, time.Time{}
		}
		s.uncertain = filter(s.uncertain, func(w *writeRec) bool { return !w.Time.Before(horizon) || w.State == audit.StatePending })
		return true, s.last
	})
	d.creates.sweep(horizon, func(_ createKey, l *[]*createRec) (bool, time.Time) {
		kept, first := keepSince(*l, horizon, func(r *createRec) time.Time { return r.w.Time })
		*l = kept
		return len(kept) > 0, first
	})
	d.failed.sweep(horizon, func(_ uint64, l *[]*failedReq) (bool, time.Time) {
		kept, first := keepSince(*l, horizon, func(f *failedReq) time.Time { return f.at.t })
		*l = kept
		return len(kept) > 0, first
	})
}

// filter keeps, in place and in order, the items keep accepts.
func filter[T any](items []T, keep func(T) bool) []T {
	kept := items[:0]
	for _, it := range items {
		if keep(it) {
			kept = append(kept, it)
		}
	}
	clear(items[len(kept):])
	return kept
}
