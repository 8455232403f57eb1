package detect

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
	d.docs.sweep(horizon, func(_ uint64, s *docState) (bool, etime) {
		first := s.last
		keep := func(w *writeRec) bool {
			if !w.at.t.Before(horizon) || w.state == wPending {
				if w.at.t.Before(first) {
					first = w.at.t
				}
				return true
			}
			return false
		}
		s.writes = filter(s.writes, keep)
		proof := 0
		if m := s.more; m != nil {
			m.uncertain = filter(m.uncertain, keep)
			m.proof = filter(m.proof, keep)
			proof = len(m.proof)
			if len(m.uncertain) == 0 && proof == 0 && (m.integrity.IsZero() || m.integrity.Before(horizon)) {
				s.more = nil
			}
		}
		return !s.last.Before(horizon) || len(s.writes) > 0 || proof > 0, first
	})
	d.reads.sweep(d.clock.Add(-d.cfg.AllowedLateness-d.cfg.Lateness), func(_ uint64, rs *readList) (bool, etime) {
		kept, first := keepSince(rs.l, d.clock.Add(-d.cfg.AllowedLateness-d.cfg.Lateness), func(r readRec) etime { return r.at.t })
		rs.l = kept
		return len(kept) > 0, first
	})
	// A key is dropped once no call judged from now on can be dated within
	// the horizon after its last use (binderBefore forgets it then): a
	// call comes up to the allowed lateness behind the watermark (rnd24;
	// until then it was dropped at the horizon, so that a late use found
	// it forgotten or not as the sweep had gone). Until then it is visited
	// at each sweep.
	keyHorizon := horizon.Add(-d.cfg.AllowedLateness - d.cfg.Lateness)
	d.keys.sweep(horizon, func(_ uint64, s *keyState) (bool, etime) {
		if s.last.Before(keyHorizon) {
			return false, 0
		}
		if s.more != nil {
			s.more.uncertain = filter(s.more.uncertain, func(w *writeRec) bool { return !w.at.t.Before(horizon) || w.state == wPending })
		}
		// The reuse rule's items before the uses forgotten below are
		// folded first: the rule goes on from the state they leave.
		d.foldReuses(s, max(horizon, d.clock.Add(-d.cfg.AllowedLateness-d.cfg.Lateness)))
		// Of the uses before the horizon, only the one that binds the key
		// there still matters (binderBefore starts from it): a key kept
		// in use for hours keeps one old use, not all of them. A key
		// forgotten there binds nothing (rnd24): its next use binds it
		// anew, and none is kept.
		n := 0
		for n < len(s.events) && s.events[n].pos().t.Before(horizon) {
			n++
		}
		if n > 0 {
			b := d.binderBefore(s, pos{t: horizon})
			if b == nil || n > 1 {
				s.dropped = max(s.dropped, s.events[n-1].pos().t)
				kept := s.events[:0]
				if b != nil {
					kept = append(kept, *b)
				}
				kept = append(kept, s.events[n:]...)
				clear(s.events[len(kept):])
				s.events = kept
			}
		}
		// Visited again when the next use passes the horizon.
		if len(s.events) > 1 && s.events[1].pos().t.Before(s.last) {
			return true, s.events[1].pos().t
		}
		return true, s.last
	})
	d.creates.sweep(horizon, func(_ createKey, l *[]*createRec) (bool, etime) {
		kept, first := keepSince(*l, horizon, func(r *createRec) etime { return r.w.at.t })
		*l = kept
		return len(kept) > 0, first
	})
	d.failed.sweep(horizon, func(_ uint64, l *[]*failedReq) (bool, etime) {
		kept, first := keepSince(*l, horizon, func(f *failedReq) etime { return f.at.t })
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
