package detect

import (
	"slices"
	"time"
)

// A partition keeps at most Config.MaxSources sources. Each computation
// of its watermark's bound (when its memo does not hold: boundMemo), each
// expiry sweep and each status go over them, and the state file lists
// them: a sender naming a new source per request (a random instance
// id per process or per call, a misconfigured fleet, a hostile sender)
// would otherwise make every later call, tick and status cost more, for
// the hour a quiet source is kept (forgetQuiet). Two sources are not
// counted against the bound: the stream replayed at start (ReplaySource)
// and the partition's overflow source.

// makeRoom reports whether partition p has room at wall for a source new
// to it, making it when p is full by forgetting the source quiet the
// longest (as forgetQuiet does, its clock kept in p.gone): churn of
// short-lived sources (pods of rolling deploys, posters that come and go)
// never overflows. A quiet source that still holds p at the lag it showed
// (heldClock: a clock minutes slow, quiet with the rest of its server) is
// chosen only when every quiet source holds so: every pod that delivered
// with a lag within max_clock_lag holds for that long once quiet, so
// sparing them all would make the churn of a rolling deploy overflow.
func (e *Engine) makeRoom(p *partition, wall time.Time) bool {
	if !e.full(p) {
		return true
	}
	i, heldOnly := -1, true
	for j, s := range p.sources {
		if s.overflow || s.key.name == e.replay || s.alive.IsZero() || !e.quiet(s, wall) {
			continue
		}
		_, held := e.heldClock(p, s, wall)
		if i >= 0 && (held && !heldOnly || held == heldOnly && !s.alive.Before(p.sources[i].alive)) {
			continue
		}
		i, heldOnly = j, held
	}
	if i < 0 {
		return false
	}
	e.forget(p, p.sources[i], wall)
	p.sources = slices.Delete(p.sources, i, i+1)
	p.displaced++
	e.forgetRoutes()
	return true
}

// full reports whether partition p holds Config.MaxSources sources
// (not counting the replayed stream and the overflow source); never when
// MaxSources is 0 (no bound).
func (e *Engine) full(p *partition) bool {
	m := e.cfg.MaxSources
	switch n := len(p.sources); {
	case m <= 0 || n < m:
		return false
	case n >= m+2:
		return true
	}
	n := 0
	for _, s := range p.sources {
		if !s.overflow && (e.replay == "" || s.key.name != e.replay) {
			n++
		}
	}
	return n >= m
}

// overflowOf returns partition p's overflow source, made at the first
// call p had no room for. It is not among the engine's sources by name:
// a sender naming its source OverflowSource has its own.
func (e *Engine) overflowOf(p *partition) *source {
	if p.overflow == nil {
		s := &source{key: e.keyOf(p.key, OverflowSource), overflow: true}
		s.parts = []*partition{p}
		p.sources = append(p.sources, s)
		p.overflow = s
	}
	return p.overflow
}

// forget unlinks source s from partition p at wall, keeping its quiet
// clock for p when it is the latest (partition.gone); the caller removes
// it from p.sources. A source left feeding no partition leaves the engine.
func (e *Engine) forget(p *partition, s *source, wall time.Time) {
	p.memo.invalidate()
	if p.gone.alive.IsZero() || quietClock(s.max, s.alive, wall).After(quietClock(p.gone.max, p.gone.alive, wall)) {
		p.gone.max, p.gone.alive = s.max, s.alive
	}
	s.parts = slices.DeleteFunc(s.parts, func(x *partition) bool { return x == p })
	if len(s.parts) == 0 {
		e.unregister(s)
	}
	if s == p.overflow {
		p.overflow = nil
	}
}

// unregister removes source s from the engine's sources by name, if it is
// the one so named (an overflow source never is).
func (e *Engine) unregister(s *source) {
	if e.sources[s.key] != s {
		return
	}
	delete(e.sources, s.key)
	k := [2]string{s.key.tenant, s.key.name}
	if same := slices.DeleteFunc(e.named[k], func(x *source) bool { return x == s }); len(same) > 0 {
		e.named[k] = same
	} else {
		delete(e.named, k)
	}
}

// register makes source s known to the engine.
func (e *Engine) register(s *source) {
	e.sources[s.key] = s
	k := [2]string{s.key.tenant, s.key.name}
	e.named[k] = append(e.named[k], s)
}
