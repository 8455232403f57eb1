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
// feeding none; it returns the keys removed. Nothing a later call could be
// judged against is lost: a call for a removed partition starts a new one,
// as the first call of a server does. The live service calls it after a
// commit, so that what the partition produced is stored.
func (e *Engine) ExpireIdle(wall time.Time, idle time.Duration) []PartitionKey {
	var out []PartitionKey
	for k, p := range e.parts {
		if !p.empty() || wall.Sub(p.born) < idle {
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
			continue
		}
		for _, s := range p.sources {
			s.parts = slices.DeleteFunc(s.parts, func(x *partition) bool { return x == p })
			if len(s.parts) == 0 {
				delete(e.sources, s.key)
			}
		}
		delete(e.parts, k)
		e.forgetRoutes()
		out = append(out, k)
	}
	return out
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
		d.failed.len() == 0 && len(d.deadlines) == 0 && len(d.deferred) == 0
}

// Has reports whether the engine holds the partition k.
func (e *Engine) Has(k PartitionKey) bool { return e.parts[k] != nil }

// Keys returns the keys of the partitions the engine holds.
func (e *Engine) Keys() []PartitionKey {
	out := make([]PartitionKey, 0, len(e.parts))
	for k := range e.parts {
		out = append(out, k)
	}
	return out
}
