package detect

import (
	"cmp"
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
// than the correlation window plus the allowed lateness (forgetQuiet). A
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
// forgotten source counted stays in the partition's counts.
func (e *Engine) forgetQuiet(p *partition, wall time.Time, long time.Duration) {
	n := len(p.sources)
	p.sources = slices.DeleteFunc(p.sources, func(s *source) bool {
		if s.alive.IsZero() || wall.Sub(s.alive) < long {
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

// keepFreedCounts adds the counts of partition p, about to be freed, and
// of its sources to what FreedStatus tells of its key.
func (e *Engine) keepFreedCounts(p *partition) {
	if e.freed == nil {
		e.freed = map[PartitionKey]*PartitionStatus{}
	}
	f := e.freed[p.key]
	if f == nil {
		f = &PartitionStatus{PartitionKey: p.key}
		e.freed[p.key] = f
	}
	f.Counts.Add(p.Counts)
	f.OverflowCalls += p.overflowCalls
	f.SourcesDisplaced += p.displaced
	for _, s := range p.sources {
		name, overflow := s.key.name, s.overflow
		i := slices.IndexFunc(f.Sources, func(x SourceStatus) bool { return x.Name == name })
		if i < 0 && len(f.Sources) >= e.cfg.MaxSources {
			// Bounded as a live partition's sources are (MaxSources): a
			// server whose pods each had a source of their own would
			// otherwise keep one more per pod for as long as the collector
			// runs. The sources past the bound are told under the overflow
			// source, which names their senders (rev19p).
			name, overflow = OverflowSource, true
			i = slices.IndexFunc(f.Sources, func(x SourceStatus) bool { return x.Name == name })
		}
		if i < 0 {
			i = len(f.Sources)
			f.Sources = append(f.Sources, SourceStatus{Name: name, Idle: true, Overflow: overflow})
		}
		if name == OverflowSource && !s.overflow && s.TooLate > 0 &&
			len(f.Sources[i].TooLateSenders) < TooLateSendersKept && !slices.Contains(f.Sources[i].TooLateSenders, s.key.name) {
			f.Sources[i].TooLateSenders = append(f.Sources[i].TooLateSenders, s.key.name)
		}
		f.Sources[i].Counts.Add(s.Counts)
		for _, n := range s.tooLateSenders {
			if len(f.Sources[i].TooLateSenders) < TooLateSendersKept && !slices.Contains(f.Sources[i].TooLateSenders, n) {
				f.Sources[i].TooLateSenders = append(f.Sources[i].TooLateSenders, n)
			}
		}
	}
}

// FreedStatus returns, per key under which ExpireIdle removed partitions
// since the start, what those partitions and their sources counted (the
// counts only: no watermark, nothing buffered, every source idle), in
// key order. What Status tells of the key's live partition, if one was
// made again, counts from its making: the two add up to what the metrics
// count since the start (mcpaudit_pipeline_late_calls_total and the
// others, which carry a freed partition's counts).
func (e *Engine) FreedStatus() []PartitionStatus {
	out := make([]PartitionStatus, 0, len(e.freed))
	for _, f := range e.freed {
		c := *f
		c.Sources = slices.Clone(f.Sources)
		for i := range c.Sources {
			c.Sources[i].TooLateSenders = slices.Clone(f.Sources[i].TooLateSenders)
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b PartitionStatus) int {
		return cmp.Compare(a.Tenant+"\x00"+a.Server, b.Tenant+"\x00"+b.Server)
	})
	return out
}
