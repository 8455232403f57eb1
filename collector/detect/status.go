package detect

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// PartitionStatus is where one partition stands.
type PartitionStatus struct {
	PartitionKey
	// Gen tells the partition from an earlier one under its key, freed
	// when idle: its counts began at zero (the metrics carry the earlier
	// one's).
	Gen uint64 `json:"-"`
	// Watermark is the event time up to which every call was judged.
	Watermark time.Time `json:"watermark"`
	// Lag is how far the watermark is behind the wall clock.
	Lag time.Duration `json:"lag_ns"`
	// Buffered counts calls waiting for the watermark.
	Buffered int `json:"buffered"`
	Counts
	// HeldBy names the source the watermark waits for: the active source
	// with the earliest clock, leaving out those further behind the
	// watermark than the allowed lateness, which hold nothing back; or an
	// idle one still holding at the lag it showed while it delivered (a
	// slow clock, quiet with the rest of its server). Empty when every
	// source is idle and none holds so.
	HeldBy  string         `json:"held_by,omitempty"`
	Sources []SourceStatus `json:"sources"`
	// HeldUntil is, after a restart, the wall time until which the
	// watermark does not pass HeldAt, what the partition's sources had
	// delivered at the stop less the lateness bound, while their senders'
	// backlogs come (HoldAfterRestart). Zero when no such hold is in force.
	HeldUntil time.Time `json:"held_until,omitzero"`
	HeldAt    time.Time `json:"held_at,omitzero"`
	// OverflowCalls counts the calls taken under the partition's overflow
	// source (OverflowSource) since the start: calls of sources it had no
	// room for (Config.MaxSources, none of its sources quiet), stored and
	// judged, their senders' clocks not followed one by one.
	// SourcesDisplaced counts the quiet sources forgotten to make room for
	// a new one.
	OverflowCalls    int64 `json:"overflow_calls"`
	SourcesDisplaced int64 `json:"sources_displaced"`
	// Pending counts the partition's judged writes still pending: a later
	// call may prove them durable, or their verification window
	// (Config.VerifyWindow) ends and makes them unverified, once the
	// watermark passes its end (and their source has delivered past it).
	// PendingUntil is the latest end of those windows; zero when none.
	Pending      int       `json:"pending"`
	PendingUntil time.Time `json:"pending_until,omitzero"`
	// FreedDropped is set only in an OverflowServer entry of
	// Engine.FreedStatus: how many times a key of the tenant was dropped
	// past FreedKept, its counts added to it. A key freed again after it
	// was dropped, and dropped again, counts again: it counts drops (freed
	// partitions), not distinct servers, which would take a set of every
	// key dropped.
	FreedDropped int64 `json:"freed_dropped,omitempty"`
	// FallenBehind is set when something waits for the watermark longer than
	// the collector allows for (FallenBehind): calls, with the watermark more
	// than Config.IdleTimeout behind the wall clock, or, with no call
	// waiting, judged writes pending, with it more than
	// Config.AllowedLateness behind. A quiet partition with nothing
	// waiting is never behind, whatever its lag: its lag is how late its
	// last delivery came, and the next call moves its watermark on.
	FallenBehind bool `json:"fallen_behind"`
}

// FallenBehind reports whether a partition whose watermark is lag behind the
// wall clock, with buffered calls waiting for it and pending judged
// writes, is behind (PartitionStatus.FallenBehind) under cfg. Calls waiting are
// behind past the idle timeout: more than a healthy exporter's flush
// explains. Writes pending alone are behind past the allowed lateness:
// their windows close when the watermark passes their end, and a quiet
// partition's watermark trails the wall clock by the delay of its last
// delivery, which may be up to the allowed lateness by design.
func FallenBehind(cfg Config, lag time.Duration, buffered, pending int) bool {
	return buffered > 0 && lag > cfg.IdleTimeout || pending > 0 && lag > cfg.AllowedLateness
}

// SourceStatus is where one source stands.
type SourceStatus struct {
	Name string `json:"name"`
	// LastEvent is the latest event time the source delivered (clamped to
	// the wall clock plus the allowed skew); LastSeen the wall time of its
	// latest delivery.
	LastEvent time.Time `json:"last_event"`
	LastSeen  time.Time `json:"last_seen"`
	// Lag is how far its event time is behind the wall clock.
	Lag time.Duration `json:"lag_ns"`
	// Idle: quiet for the idle timeout, it no longer holds its partitions,
	// unless it still holds one at the lag it showed while it delivered
	// (a slow clock): then HoldLag is that lag, and HoldUntil the wall
	// time its hold ends, later by any quiet spell of the whole partition
	// meanwhile.
	Idle      bool          `json:"idle"`
	HoldLag   time.Duration `json:"hold_lag_ns,omitempty"`
	HoldUntil time.Time     `json:"hold_until,omitzero"`
	// Overflow is set on the partition's overflow source (OverflowSource).
	Overflow bool `json:"overflow,omitempty"`
	// TooLateSenders, on the overflow source, names the senders of its
	// latest calls counted too late, the most recent first, each once, at
	// most TooLateSendersKept: the calls are stored under their names.
	TooLateSenders []string `json:"too_late_senders,omitempty"`
	Counts
}

// TooLateSendersKept is how many senders of its calls counted too late an
// overflow source names (SourceStatus.TooLateSenders): the latest few, so
// that senders naming a new source per request cost no more.
const TooLateSendersKept = 5

// recentFirst returns names with name first, moved there if it was in
// it, and at most max long. A name new to it is copied: it may be part of
// a request's buffer.
func recentFirst(names []string, name string, max int) []string {
	if i := slices.Index(names, name); i >= 0 {
		copy(names[1:i+1], names[:i])
		names[0] = name
		return names
	}
	if len(names) < max {
		names = append(names, "")
	}
	copy(names[1:], names)
	names[0] = strings.Clone(name)
	return names
}

// Counts counts the calls of a partition, or of a source in it.
type Counts struct {
	// Calls counts calls delivered; Late those judged behind the
	// watermark; TooLate those beyond the allowed lateness, not judged;
	// Ahead those dated beyond the allowed clock skew. Behind counts
	// those of TooLate whose source had never delivered a call dated
	// within MaxClockLag of its arrival: a clock that slow (or a sender
	// that joined with a backlog that old), where the other calls too
	// late came from a source once current, a backlog delivered late.
	Calls   int64 `json:"calls"`
	Late    int64 `json:"late"`
	TooLate int64 `json:"too_late"`
	Ahead   int64 `json:"ahead"`
	Behind  int64 `json:"behind"`
	// IDCollisions counts calls dropped unjudged for sharing their
	// (trace_id, span_id) with another call whose request differs, or
	// their call id with one that answered otherwise (Collision); for a
	// source, those its deliveries revealed.
	IDCollisions int64 `json:"id_collisions"`
	// TooLateFrom and TooLateTo span the event times of the calls counted
	// too late since the start: the calls whose findings may be missing.
	// Zero when there are none.
	TooLateFrom time.Time `json:"too_late_from"`
	TooLateTo   time.Time `json:"too_late_to"`
}

// Add adds the counts of o to c.
func (c *Counts) Add(o Counts) {
	c.Calls += o.Calls
	c.Late += o.Late
	c.TooLate += o.TooLate
	c.Ahead += o.Ahead
	c.Behind += o.Behind
	c.IDCollisions += o.IDCollisions
	sp := c.TooLateSpan()
	sp.Merge(o.TooLateSpan())
	c.TooLateFrom, c.TooLateTo = sp.From, sp.To
}

// TooLateSpan returns the event-time span of the calls counted too late.
func (c *Counts) TooLateSpan() Span { return Span{From: c.TooLateFrom, To: c.TooLateTo} }

// countKind is what a call is counted as.
type countKind uint8

const (
	countCall      countKind = iota // delivered
	countLate                       // judged behind the watermark
	countTooLate                    // beyond the allowed lateness, not judged
	countAhead                      // dated beyond the allowed clock skew
	countBehind                     // too late, its source's clock behind by more than MaxClockLag
	countCollision                  // dropped for another call under its span ids
)

// add counts one call of kind k dated t.
func (c *Counts) add(k countKind, t time.Time) {
	switch k {
	case countCall:
		c.Calls++
	case countLate:
		c.Late++
	case countTooLate:
		c.TooLate++
		sp := c.TooLateSpan()
		sp.Add(t)
		c.TooLateFrom, c.TooLateTo = sp.From, sp.To
	case countAhead:
		c.Ahead++
	case countBehind:
		c.Behind++
	case countCollision:
		c.IDCollisions++
	}
}

// count counts one call of kind k dated t for its partition p and its
// source s.
func count(p *partition, s *source, k countKind, t time.Time) {
	p.add(k, t)
	s.add(k, t)
}

// Status returns every partition and its sources at wall time now, the
// partitions most behind first.
func (e *Engine) Status(now time.Time) []PartitionStatus {
	out := make([]PartitionStatus, 0, len(e.parts))
	for _, p := range e.parts {
		ps := PartitionStatus{
			PartitionKey: p.key, Gen: p.gen, Watermark: p.wm, Buffered: p.buf.Len(), Counts: p.Counts,
			OverflowCalls: p.overflowCalls, SourcesDisplaced: p.displaced,
		}
		if !p.wm.IsZero() {
			ps.Lag = now.Sub(p.wm)
		}
		if now.Before(p.hold) {
			ps.HeldUntil, ps.HeldAt = p.hold, p.holdAt
		}
		ps.Pending, ps.PendingUntil = p.det.pending()
		ps.FallenBehind = !p.wm.IsZero() && FallenBehind(e.cfg, ps.Lag, ps.Buffered, ps.Pending)
		for _, s := range p.sources {
			ss := SourceStatus{
				Name: s.key.name, LastEvent: s.max, LastSeen: s.lastSeen,
				Idle:     !s.alive.IsZero() && now.Sub(s.alive) >= e.cfg.IdleTimeout,
				Overflow: s.overflow, Counts: s.Counts, TooLateSenders: slices.Clone(s.tooLateSenders),
			}
			if !s.max.IsZero() {
				ss.Lag = now.Sub(s.max)
			}
			if ss.Idle {
				if c, ok := e.heldClock(p, s, now); ok {
					ss.HoldLag, ss.HoldUntil = now.Sub(c), s.holdUntil
				}
			}
			ps.Sources = append(ps.Sources, ss)
		}
		if h, _ := e.holder(p, now); h != nil {
			ps.HeldBy = h.key.name
		}
		slices.SortFunc(ps.Sources, func(a, b SourceStatus) int { return cmp.Compare(b.Lag, a.Lag) })
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b PartitionStatus) int {
		if c := cmp.Compare(b.Lag, a.Lag); c != 0 {
			return c
		}
		return cmp.Compare(a.Tenant+"\x00"+a.Server, b.Tenant+"\x00"+b.Server)
	})
	return out
}

// Watermarks returns every partition's watermark.
func (e *Engine) Watermarks() map[PartitionKey]time.Time {
	m := make(map[PartitionKey]time.Time, len(e.parts))
	for k, p := range e.parts {
		if !p.wm.IsZero() {
			m[k] = p.wm
		}
	}
	return m
}

// Waiting returns, for every partition with calls waiting for its
// watermark, the event time of the earliest of them.
func (e *Engine) Waiting() map[PartitionKey]time.Time {
	m := map[PartitionKey]time.Time{}
	for k, p := range e.parts {
		for p.buf.Len() > 0 && (p.buf[0].at != p.buf[0].s.at || p.buf[0].s.processed) {
			p.buf.pop() // replaced observations
		}
		if p.buf.Len() > 0 {
			m[k] = p.buf[0].at.t.Time()
		}
	}
	return m
}

// OpenKeys counts the correlation keys the engine holds open: documents,
// idempotency keys, create identities, refused requests, documents with
// recent reads and observations kept for dedupe, over every partition.
func (e *Engine) OpenKeys() int {
	n := 0
	for _, p := range e.parts {
		d := p.det
		n += d.docs.len() + d.keys.len() + d.creates.len() + d.failed.len() + d.reads.len()
		n += p.dedupe.byReq.len() + p.dedupe.bySpan.len()
	}
	return n
}

// BufferedBy fills into, cleared first, with how many calls of each
// tenant wait for their partitions' watermarks, and returns the total.
func (e *Engine) BufferedBy(into map[string]int64) int {
	clear(into)
	n := 0
	for k, p := range e.parts {
		if l := p.buf.Len(); l > 0 {
			into[k.Tenant] += int64(l)
			n += l
		}
	}
	return n
}

// Deferred returns, for every partition holding verification windows open
// past their end for a source that is behind (see expire), the earliest
// end of them: their output is yet to be made, though the watermark has
// passed it.
func (e *Engine) Deferred() map[PartitionKey]time.Time {
	m := map[PartitionKey]time.Time{}
	for k, p := range e.parts {
		for _, w := range p.det.deferred {
			if w.state != wPending {
				continue
			}
			if t := p.det.deadline(w).Time(); m[k].IsZero() || t.Before(m[k]) {
				m[k] = t
			}
		}
	}
	return m
}
