package detect

import (
	"cmp"
	"slices"
)

// FreedKept is how many keys (tenant, server) FreedStatus tells one by
// one. Past it, the key freed the longest ago is dropped and its counts
// added to its tenant's OverflowServer entry, which says how many drops it
// holds (PartitionStatus.FreedDropped: a key dropped again counts again):
// the totals stay what the metrics
// count, and a fleet whose servers come and go (a server name per
// deployment or per request) costs no more than FreedKept keys of memory
// and of each status, however long the collector runs. As many as the
// state file keeps of freed partitions' watermarks (1,000).
const FreedKept = 1000

// OverflowServer names, in FreedStatus, the entry of a tenant that holds
// the counts of its keys dropped past FreedKept. It is no server's name a
// partition is made for: a server naming itself so is kept apart by
// FreedDropped being zero.
const OverflowServer = "mcpaudit/overflow"

// freedEntry is what FreedStatus tells of one key, and the number of its
// latest freeing (Engine.freedSeq).
type freedEntry struct {
	PartitionStatus
	seq uint64
}

// freedPlace is a key's place in Engine.freedOrder: stale when the key
// was freed again since (its entry's seq is greater) or dropped.
type freedPlace struct {
	k   PartitionKey
	seq uint64
}

// keepFreedCounts adds the counts of partition p, about to be freed, and
// of its sources to what FreedStatus tells of its key, and drops the keys
// freed the longest ago past FreedKept.
func (e *Engine) keepFreedCounts(p *partition) {
	if e.freed == nil {
		e.freed = map[PartitionKey]*freedEntry{}
	}
	f := e.freed[p.key]
	if f == nil {
		f = &freedEntry{PartitionStatus: PartitionStatus{PartitionKey: p.key}}
		e.freed[p.key] = f
	}
	e.freedSeq++
	f.seq = e.freedSeq
	e.freedOrder = append(e.freedOrder, freedPlace{p.key, f.seq})
	f.Counts.Add(p.Counts)
	f.OverflowCalls += p.overflowCalls
	f.SourcesDisplaced += p.displaced
	for _, s := range p.sources {
		e.addFreedSource(&f.PartitionStatus, s.key.name, s.overflow, &s.Counts, s.tooLateSenders)
	}
	for len(e.freed) > FreedKept {
		e.dropFreed()
	}
	if len(e.freedOrder) > 2*len(e.freed)+16 {
		// Stale places outnumber the live ones: one per key left.
		e.freedOrder = slices.DeleteFunc(e.freedOrder, func(x freedPlace) bool {
			f := e.freed[x.k]
			return f == nil || f.seq != x.seq
		})
	}
}

// dropFreed drops the key freed the longest ago from FreedStatus, and adds
// its counts to its tenant's OverflowServer entry.
func (e *Engine) dropFreed() {
	for len(e.freedOrder) > 0 {
		x := e.freedOrder[0]
		e.freedOrder[0] = freedPlace{}
		e.freedOrder = e.freedOrder[1:]
		f := e.freed[x.k]
		if f == nil || f.seq != x.seq {
			continue
		}
		delete(e.freed, x.k)
		if e.freedDropped == nil {
			e.freedDropped = map[string]*PartitionStatus{}
		}
		o := e.freedDropped[x.k.Tenant]
		if o == nil {
			o = &PartitionStatus{PartitionKey: PartitionKey{Tenant: x.k.Tenant, Server: OverflowServer}}
			e.freedDropped[x.k.Tenant] = o
		}
		o.FreedDropped++
		o.Counts.Add(f.Counts)
		o.OverflowCalls += f.OverflowCalls
		o.SourcesDisplaced += f.SourcesDisplaced
		for i := range f.Sources {
			s := &f.Sources[i]
			e.addFreedSource(o, s.Name, s.Overflow, &s.Counts, s.TooLateSenders)
		}
		return
	}
}

// addFreedSource adds to f the counts c of the source name (overflow: a
// partition's overflow source) and the senders of its calls too late it
// names. A key keeps at most Config.MaxSources sources, as a live
// partition does: a server whose pods each had a source of their own
// would otherwise keep one more per pod for as long as the collector
// runs. The sources past the bound are told under the overflow source,
// which names their senders (rev19p).
func (e *Engine) addFreedSource(f *PartitionStatus, name string, overflow bool, c *Counts, senders []string) {
	own, ownOverflow := name, overflow
	i := slices.IndexFunc(f.Sources, func(x SourceStatus) bool { return x.Name == name })
	if i < 0 && len(f.Sources) >= e.cfg.MaxSources {
		name, overflow = OverflowSource, true
		i = slices.IndexFunc(f.Sources, func(x SourceStatus) bool { return x.Name == name })
	}
	if i < 0 {
		i = len(f.Sources)
		f.Sources = append(f.Sources, SourceStatus{Name: name, Idle: true, Overflow: overflow})
	}
	t := &f.Sources[i]
	if name == OverflowSource && !ownOverflow && c.TooLate > 0 &&
		len(t.TooLateSenders) < TooLateSendersKept && !slices.Contains(t.TooLateSenders, own) {
		t.TooLateSenders = append(t.TooLateSenders, own)
	}
	t.Counts.Add(*c)
	for _, n := range senders {
		if len(t.TooLateSenders) < TooLateSendersKept && !slices.Contains(t.TooLateSenders, n) {
			t.TooLateSenders = append(t.TooLateSenders, n)
		}
	}
}

// FreedStatus returns, per key under which ExpireIdle removed partitions
// since the start, what those partitions and their sources counted (the
// counts only: no watermark, nothing buffered, every source idle), in
// key order: at most FreedKept keys, the ones freed latest, and per
// tenant that had keys dropped past it an OverflowServer entry with their
// counts and how many drops they are (FreedDropped). What Status tells of the
// key's live partition, if one was made again, counts from its making:
// the two add up to what the metrics count since the start
// (mcpaudit_pipeline_late_calls_total and the others, which carry a freed
// partition's counts).
func (e *Engine) FreedStatus() []PartitionStatus {
	out := make([]PartitionStatus, 0, len(e.freed)+len(e.freedDropped))
	clone := func(f *PartitionStatus) {
		c := *f
		c.Sources = slices.Clone(f.Sources)
		for i := range c.Sources {
			c.Sources[i].TooLateSenders = slices.Clone(f.Sources[i].TooLateSenders)
		}
		out = append(out, c)
	}
	for _, f := range e.freed {
		clone(&f.PartitionStatus)
	}
	for _, f := range e.freedDropped {
		clone(f)
	}
	slices.SortFunc(out, func(a, b PartitionStatus) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Server, b.Server), cmp.Compare(a.FreedDropped, b.FreedDropped))
	})
	return out
}
