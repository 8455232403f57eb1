package detect

import (
	"slices"
	"strings"
	"time"
)

// SourceClock is where one source of a partition stood: its name, the
// latest event time it delivered, and the wall time of its latest delivery
// (zero when unknown: a state file of a release before it was kept). For
// a quiet source that still holds its partition at the lag it showed
// (QuietSources), Lag is that lag and HoldFor how much longer it holds.
// Behind is set for a source that never delivered a call within
// MaxClockLag of its arrival (a slow clock): restored, it is still not
// current, and its calls too late still count behind.
type SourceClock struct {
	Name    string        `json:"name"`
	Clock   time.Time     `json:"clock"`
	Seen    time.Time     `json:"seen,omitzero"`
	Lag     time.Duration `json:"lag,omitzero"`
	HoldFor time.Duration `json:"hold_for,omitzero"`
	Behind  bool          `json:"behind,omitzero"`
}

// ActiveSources returns, for every partition, the sources still holding it
// back at wall time wall (not idle), with their clocks, except skip (the
// stream replayed from the store at start, which is no exporter) and the
// overflow source (OverflowSource: no one sender's clock).
func (e *Engine) ActiveSources(wall time.Time, skip string) map[PartitionKey][]SourceClock {
	m := map[PartitionKey][]SourceClock{}
	for k, p := range e.parts {
		for _, s := range p.sources {
			if s.overflow || s.key.name == skip || e.idle(s, wall) {
				continue
			}
			m[k] = append(m[k], SourceClock{Name: s.key.name, Clock: s.max, Seen: s.lastSeen, Behind: !s.current})
		}
		slices.SortFunc(m[k], func(a, b SourceClock) int { return strings.Compare(a.Name, b.Name) })
	}
	return m
}

// QuietSources returns, for every partition, its quiet sources that still
// hold it at wall time wall at the lag they showed while they delivered (a
// clock minutes slow, quiet with the rest of its server: heldClock), with
// their lag and how much longer they hold. Kept across a restart
// (RestoreQuietSource), so that a restart while such a pod is quiet does
// not leave its calls too late when it comes back.
func (e *Engine) QuietSources(wall time.Time) map[PartitionKey][]SourceClock {
	m := map[PartitionKey][]SourceClock{}
	for k, p := range e.parts {
		for _, s := range p.sources {
			if s.overflow || !e.quiet(s, wall) {
				continue
			}
			if _, ok := e.heldClock(p, s, wall); !ok {
				continue
			}
			m[k] = append(m[k], SourceClock{Name: s.key.name, Clock: s.max, Seen: s.lastSeen, Lag: s.lag, HoldFor: s.holdUntil.Sub(e.holdNow(p, wall))})
		}
		slices.SortFunc(m[k], func(a, b SourceClock) int { return strings.Compare(a.Name, b.Name) })
	}
	return m
}

// RestoreQuietSource makes the engine know, before anything else arrives,
// a source that was quiet when the last run stopped and still held
// partition k at its lag (QuietSources): quiet still, it holds k at
// src.Lag behind the wall clock for src.HoldFor from wall (the time the
// collector was down does not count, as a quiet spell of its server does
// not).
//
// It reports whether the source was restored (false: no room).
func (e *Engine) RestoreQuietSource(k PartitionKey, src SourceClock, wall time.Time) bool {
	// Quiet since its last delivery (or, unknown, for the idle timeout
	// already); its spell of deliveries taught its lag.
	alive := src.Seen
	if alive.IsZero() || alive.After(wall.Add(-e.cfg.IdleTimeout)) {
		alive = wall.Add(-e.cfg.IdleTimeout)
	}
	_, s := e.restore(k, src, wall, alive, false)
	if s == nil {
		// No room (a state file written with more sources than
		// max_sources): a hold at a lag is one source's, not the
		// overflow's.
		return false
	}
	s.lag, s.spell = src.Lag, alive
	s.holdUntil = laterOf(s.holdUntil, wall.Add(src.HoldFor))
	return true
}

// restore is where RestoreSource and RestoreQuietSource begin: source src
// of partition k, known from the state file at wall time wall, its clocks
// raised to src's and its last sign of life to alive. It was current when
// the last run stopped: what it delivers now may be its backlog, however
// old (wrongClock). A partition restored with more sources than
// MaxSources (a state file of a larger max_sources, or of a release
// without it) keeps the first it is given; the others go to its
// overflow source when overflow is set, and are left out (nil) otherwise.
func (e *Engine) restore(k PartitionKey, src SourceClock, wall, alive time.Time, overflow bool) (*partition, *source) {
	p := e.partitionOf(k)
	if p.born.IsZero() {
		p.born = wall
	}
	p.memo.invalidate()
	key := e.keyOf(k, src.Name)
	s := e.sources[key]
	switch {
	case s != nil && slices.Contains(s.parts, p):
	case !overflow && e.full(p):
		// A quiet source does not take the place of another restored.
		return p, nil
	case e.makeRoom(p, wall):
		s = e.source(key)
		p.sources = append(p.sources, s)
		s.parts = append(s.parts, p)
	default:
		// Only with overflow: without it a full partition returned above,
		// and makeRoom has room in one that is not full.
		s = e.overflowOf(p)
	}
	if src.Clock.After(s.max) {
		s.max = src.Clock
	}
	if src.Seen.After(s.lastSeen) {
		s.lastSeen = src.Seen
	}
	if alive.After(s.alive) {
		s.alive = alive
	}
	if !src.Behind {
		s.current = true
	}
	return p, s
}

// RestoreSource makes the engine know, before anything else arrives, a
// source that fed partition k up to src.Clock when the last run stopped,
// at wall time wall: it holds the partition back as it did, until it
// delivers again or has been quiet for the idle timeout after wall + grace
// (its exporter retries after a backoff, and the collector may take a
// while to listen again). src.Seen, when known, is its last delivery, as
// its status shows until it delivers again.
// Without it a restart would let the partition's watermark jump to its
// fastest source, and a lagging exporter's calls would come too late.
//
// It reports whether the source was restored as its own (false: the
// partition had no room, and it holds through its overflow source).
func (e *Engine) RestoreSource(k PartitionKey, src SourceClock, wall time.Time, grace time.Duration) bool {
	alive := wall.Add(grace)
	p, s := e.restore(k, src, wall, alive, true)
	p.alive = laterOf(p.alive, alive)
	return !s.overflow
}

// RestoreWatermark raises partition k's watermark to wm, where it stood
// when the last run stopped, judging the calls waiting up to it. It is
// called after the stored calls are replayed: the replay's clock ends at
// the last stored call, while a partition whose sources had gone quiet
// had moved on with the wall clock, its windows closed and committed.
// Without it a restart would open those windows again and take the
// partition's mark back to its last call. A partition the engine does not
// hold (no replayed call, no restored source) is left alone.
//
// at, if set, is the wall time the mark was taken. The sources behind the
// mark (the replay's, whose clock ends at the last stored call) take the
// mark as their clock and at as their last sign of life: quiet since then,
// the partition goes on with the wall clock from the mark as it would have
// had the collector stayed up, and the windows that ended meanwhile close
// now. Restored sources that held the partition (ahead of the mark, in
// their grace) still hold it.
func (e *Engine) RestoreWatermark(k PartitionKey, wm, at time.Time) {
	p := e.parts[k]
	if p == nil {
		return
	}
	e.release(p, wm)
	p.memo.invalidate()
	if at.IsZero() {
		return
	}
	for _, s := range p.sources {
		if s.max.Before(wm) && at.Before(s.alive) {
			s.max, s.alive = wm, at
		}
	}
}

// HoldAfterRestart keeps partition k's watermark from passing at (what
// its sources had delivered before the stop, less the lateness bound)
// until wall time until, after a restart: the senders whose calls were
// not acknowledged while the collector was down deliver them as their
// retries come back, and a sender that retries several requests at once
// (an OpenTelemetry Collector's sending queue has 10 consumers, each with
// its own backoff of up to 30 s ± 50 %) delivers its backlog out of order:
// the first retry to succeed takes the rest of the queue, minutes of every
// source's calls, in seconds, and the oldest request, taken by a consumer
// still waiting, comes up to its backoff later. Moved on meanwhile, the
// watermark would close the windows its calls settle, and leave them later
// than the allowed lateness when the outage was longer. The calls
// delivered meanwhile wait, and are judged in time order once the hold
// ends; those acknowledged before the stop are judged at once. A
// partition the engine does not hold is left alone.
func (e *Engine) HoldAfterRestart(k PartitionKey, at, until time.Time) {
	if p := e.parts[k]; p != nil && until.After(p.hold) {
		p.hold, p.holdAt = until, at.Add(-e.cfg.Lateness)
	}
}

// Hold is a restart hold in force (HoldAfterRestart): until wall time
// Until the partition's watermark does not pass what its sources had
// delivered before the stop, At, less the lateness bound.
type Hold struct {
	Until time.Time
	At    time.Time
}

// Holds returns the restart holds in force at wall time wall, by
// partition, with the at each was given (HoldAfterRestart): kept in the
// state file, so that a start after a crash during a hold keeps it, and
// the backlog it waits for is judged when it comes.
func (e *Engine) Holds(wall time.Time) map[PartitionKey]Hold {
	m := map[PartitionKey]Hold{}
	for k, p := range e.parts {
		if wall.Before(p.hold) {
			m[k] = Hold{Until: p.hold, At: p.holdAt.Add(e.cfg.Lateness)}
		}
	}
	return m
}

// Touch says that a source tried to deliver at wall time wall and was
// refused (back-pressure, a store outage): it is not quiet, and keeps
// holding its partitions back, for its calls are still to come. A source
// the engine does not know is ignored.
func (e *Engine) Touch(tenant, name string, wall time.Time) {
	for _, s := range e.sourcesNamed(tenant, name) {
		for _, p := range s.parts {
			e.resume(p, s, wall)
			p.memo.invalidate()
		}
		if wall.After(s.alive) {
			s.alive = wall
		}
		if !s.spell.IsZero() {
			s.holdUntil = laterOf(s.holdUntil, wall.Add(e.cfg.MaxClockLag))
		}
	}
}

// idle reports whether a source has been quiet for the idle timeout at wall.
func (e *Engine) idle(s *source, wall time.Time) bool {
	return !s.alive.IsZero() && wall.Sub(s.alive) >= e.cfg.IdleTimeout
}
