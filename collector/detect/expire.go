package detect

import (
	"slices"
	"time"
)

// Partitions returns how many partitions the engine holds.
func (e *Engine) Partitions() int { return len(e.parts) }

// ExpireIdle removes the partitions that hold nothing any more (no call
// waiting, no open correlation state, no observation kept for duplicates)
// and whose sources have all been quiet for idle, and the sources left
// feeding none; it returns the partitions removed. Nothing a later call could be
// judged against is lost: a call for a removed partition starts a new one,
// as the first call of a server does. The live service calls it after a
// commit, so that what the partition produced is stored.
//
// From a partition that stays, it forgets the sources quiet for longer
// than the correlation window plus the allowed lateness, save those still
// holding it at a slow clock's lag (forgetQuiet). A
// server whose traffic never stops has a partition that never expires,
// and every exporter it ever had (each pod of every rolling deploy its own
// service.instance.id) would stay in it for as long as the collector runs,
// each call going over all of them.
func (e *Engine) ExpireIdle(wall time.Time, idle time.Duration) []Freed {
	var out []Freed
	for k, p := range e.parts {
		if !p.empty() || wall.Sub(p.born) < idle {
			e.forgetQuiet(p, wall, max(idle, e.cfg.horizon()))
			continue
		}
		quiet := true
		for _, s := range p.sources {
			if wall.Sub(s.alive) < idle {
				quiet = false
				break
			}
		}
		if !quiet {
			e.forgetQuiet(p, wall, max(idle, e.cfg.horizon()))
			continue
		}
		for _, s := range p.sources {
			s.parts = slices.DeleteFunc(s.parts, func(x *partition) bool { return x == p })
			if len(s.parts) == 0 {
				e.unregister(s)
			}
		}
		e.keepFreedCounts(p)
		delete(e.parts, k)
		e.forgetRoutes()
		out = append(out, Freed{PartitionKey: k, Gen: p.gen, Watermark: p.wm})
	}
	return out
}

// Freed is a partition ExpireIdle removed.
type Freed struct {
	PartitionKey
	// Gen is its number (PartitionStatus.Gen): a partition made for its
	// key later has a greater one.
	Gen uint64
	// Watermark is the event time up to which it had judged every call
	// (zero if it judged none).
	Watermark time.Time
}

// forgetQuiet removes from partition p the sources quiet for long at wall
// (and from the engine those left feeding no partition). A quiet source
// holds nothing back, and a source that delivers again is taken as a new
// one; only the latest quiet clock is kept (partition.gone), for the
// watermark to go on from when every source left is quiet. What a
// forgotten source counted stays in the partition's counts. A source whose
// hold at a slow clock's lag still runs (holding) is kept until it ends:
// with a correlation window of 2 m it was forgotten 4 m after it went
// quiet, not max_clock_lag (15 m) after, and an ahead clock then took the
// watermark past its next calls (out24's D2: 5 too late).
func (e *Engine) forgetQuiet(p *partition, wall time.Time, long time.Duration) {
	n := len(p.sources)
	p.sources = slices.DeleteFunc(p.sources, func(s *source) bool {
		if s.alive.IsZero() || wall.Sub(s.alive) < long || e.holding(p, s, wall) {
			return false
		}
		e.forget(p, s, wall)
		return true
	})
	if len(p.sources) < n {
		e.forgetRoutes()
	}
}

// empty reports whether the partition holds nothing (not even the
// observations that may come again).
func (p *partition) empty() bool {
	return p.buf.Len() == 0 && p.det.empty() && p.dedupe.byReq.len() == 0 && p.dedupe.bySpan.len() == 0 &&
		len(p.dedupe.old.seconds) == 0
}

// empty reports whether the detector holds no correlation state.
func (d *detector) empty() bool {
	return d.docs.len() == 0 && d.reads.len() == 0 && d.keys.len() == 0 && d.creates.len() == 0 &&
		d.failed.len() == 0 && len(d.deadlines) == 0 && len(d.deferred) == 0 && len(d.held) == 0
}

// Has reports whether the engine holds the partition k.
func (e *Engine) Has(k PartitionKey) bool { return e.parts[k] != nil }

// Gen returns the number of the partition k the engine holds
// (PartitionStatus.Gen), and whether it holds one.
func (e *Engine) Gen(k PartitionKey) (uint64, bool) {
	if p := e.parts[k]; p != nil {
		return p.gen, true
	}
	return 0, false
}

// Made returns how many partitions the engine has made: the Gen of every
// partition made from now on is greater.
func (e *Engine) Made() uint64 { return e.partitionsMade }

// Keys returns the keys of the partitions the engine holds.
func (e *Engine) Keys() []PartitionKey {
	out := make([]PartitionKey, 0, len(e.parts))
	for k := range e.parts {
		out = append(out, k)
	}
	return out
}
