package calllog

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// blockCache keeps the last blocks decoded, up to max bytes of them
// (block.size; the block put last always stays, however large): a batch
// sent again finds its duplicates in one block, decoded once. Bounded by
// count, 32 blocks of large calls held 32 times a block (dbt51).
type blockCache struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	m     map[[2]uint64]*block
	order [][2]uint64
}

func (c *blockCache) init(max int64) { c.max, c.m = max, map[[2]uint64]*block{} }

func (c *blockCache) get(k [2]uint64) *block {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *blockCache) put(k [2]uint64, b *block) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		return
	}
	c.m[k] = b
	c.order = append(c.order, k)
	c.bytes += b.size
	for c.bytes > c.max && len(c.order) > 1 {
		c.bytes -= c.m[c.order[0]].size
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
}

func (c *blockCache) drop(seg uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order = slices.DeleteFunc(c.order, func(k [2]uint64) bool {
		if k[0] == seg {
			c.bytes -= c.m[k].size
			delete(c.m, k)
			return true
		}
		return false
	})
}

// readBlock returns block bn of s, decoded. The caller holds mu (read or
// write), so that s.blocks stay, and s is listed or held.
func (l *Log) readBlock(s *segment, bn uint32) (*block, error) {
	k := [2]uint64{s.num, uint64(bn)}
	if b := l.cache.get(k); b != nil {
		return b, nil
	}
	r := s.blocks[bn]
	data := make([]byte, r.size)
	fh, err := s.files.acquire(s)
	if err != nil {
		return nil, err
	}
	_, err = fh.f.ReadAt(data, r.off)
	s.files.release(fh)
	if err != nil {
		return nil, fmt.Errorf("cannot read call log %s at byte %d: %w", s.path, r.off, err)
	}
	h, why := checkBlock(data)
	if why == "" && int64(h.bodyLen)+blockHeadLen != int64(r.size) {
		why = fmt.Sprintf("the block has %d bytes, the index says %d", int64(h.bodyLen)+blockHeadLen, r.size)
	}
	if why != "" {
		return nil, &CorruptError{Path: s.path, Offset: r.off, Reason: why}
	}
	b, err := decodeBlock(data, h)
	if err != nil {
		return nil, &CorruptError{Path: s.path, Offset: r.off, Reason: err.Error()}
	}
	l.cache.put(k, b)
	return b, nil
}

// record decodes entry e into a new record.
func record(s *segment, e *entry) (*audit.Record, error) {
	r := &audit.Record{Call: &audit.Call{ID: e.id, Time: sqlite.NanosTime(e.time)}}
	if err := sqlite.ReadRecord(e.rec, r); err != nil {
		return nil, &CorruptError{Path: s.path, Reason: fmt.Sprintf("call %s: %v", e.id, err)}
	}
	return r, nil
}

// Get returns the stored call of id with its reading, and false when the
// log does not hold it. It looks in every segment's id table; GetAt, given
// the call's time, looks in the segments covering it alone.
func (l *Log) Get(ctx context.Context, id string) (*audit.Record, bool, error) {
	return l.get(ctx, id, math.MinInt64, math.MaxInt64)
}

// GetAt is Get of a call of time t: it looks only in the live segment and
// in the sealed segments whose time range meets t's millisecond, since a
// call id hashes its call's time rounded to the millisecond
// (audit.StableID), so one lookup reads one segment's table, not all.
// A call stored under id at a time of another millisecond is not found.
func (l *Log) GetAt(ctx context.Context, id string, t time.Time) (*audit.Record, bool, error) {
	n, ok := sqlite.TimeNanos(t)
	if !ok {
		return nil, false, fmt.Errorf("cannot look up call %s at %s: %w", id, t, ErrTime)
	}
	lo, hi := idWindow(n)
	return l.get(ctx, id, lo, hi)
}

// get looks id up in the live segment and in the sealed segments whose
// time range meets [lo, hi].
func (l *Log) get(ctx context.Context, id string, lo, hi int64) (*audit.Record, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	h := idHash(id)
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.live == nil {
		return nil, false, ErrClosed
	}
	var cand []uint32
	for _, s := range append([]*segment{l.live}, l.sealed...) {
		if s != l.live && (s.max < lo || s.min > hi) {
			continue
		}
		var err error
		if cand, err = l.candidates(s, h, cand[:0]); err != nil {
			return nil, false, err
		}
		for _, bn := range cand {
			b, err := l.readBlock(s, bn)
			if err != nil {
				return nil, false, err
			}
			for i := range b.entries {
				if b.entries[i].id == id {
					r, err := record(s, &b.entries[i])
					return r, err == nil, err
				}
			}
		}
	}
	return nil, false, nil
}

// idWindow returns the first and last time, in unix nanoseconds, that a
// call of time t may have been stored at under the same id: the
// millisecond t rounds to, half a millisecond either side (time.Round
// rounds halves up). Two carriers of one call (OTLP's nanoseconds, a
// record's RFC 3339 milliseconds) give it two times in that window.
func idWindow(t int64) (lo, hi int64) {
	const ms, half = int64(time.Millisecond), int64(time.Millisecond / 2)
	if t > math.MaxInt64-ms || t < math.MinInt64+ms {
		return math.MinInt64, math.MaxInt64
	}
	m := t + half
	m -= ((m % ms) + ms) % ms // floor to the millisecond, negative times too
	return m - half, m + half - 1
}

// Scan calls fn with every stored call whose Time is in [from, to) (to
// zero: no end), with its reading, in time order (calls of one time in no
// set order). It reads only the blocks whose time range meets [from, to),
// holding at a time the blocks whose ranges overlap. Calls appended while
// it runs may or may not be seen; the calls of a segment that DeleteBefore
// removes while it runs are seen (the segment's file is closed when the
// last scan reading it ends).
func (l *Log) Scan(ctx context.Context, from, to time.Time, fn func(*audit.Record) error) error {
	return l.scan(ctx, from, to, 0, nil, fn)
}

// ByDocument is Scan of the calls that name doc (audit.Record.Documents),
// reading only the blocks the segments' document index names.
func (l *Log) ByDocument(ctx context.Context, doc string, from, to time.Time, fn func(*audit.Record) error) error {
	return l.scan(ctx, from, to, keyHash(keyDocument, doc), func(r *audit.Record) bool {
		return slices.Contains(r.Documents(), doc)
	}, fn)
}

// BySession is Scan of the calls of one session, reading only the blocks
// the segments' session index names.
func (l *Log) BySession(ctx context.Context, session string, from, to time.Time, fn func(*audit.Record) error) error {
	return l.scan(ctx, from, to, keyHash(keySession, session), func(r *audit.Record) bool {
		return r.Call.Session == session
	}, fn)
}

// scan is Scan; with keep set, of the blocks of key hash key alone, and
// of their calls that keep takes (a key matches on its hash).
func (l *Log) scan(ctx context.Context, from, to time.Time, key uint64, keep func(*audit.Record) bool, fn func(*audit.Record) error) error {
	lo, ok := sqlite.TimeNanos(from)
	if !ok {
		return fmt.Errorf("cannot scan calls from %s: %w", from, ErrTime)
	}
	hi := int64(math.MaxInt64)
	if !to.IsZero() {
		if hi, ok = sqlite.TimeNanos(to); !ok {
			return fmt.Errorf("cannot scan calls to %s: %w", to, ErrTime)
		}
	}
	type ref struct {
		s  *segment
		bn uint32
		r  blockRef
	}
	l.mu.RLock()
	if l.live == nil {
		l.mu.RUnlock()
		return ErrClosed
	}
	var refs []ref
	var picked []uint32
	var held []*segment
	defer func() {
		for _, s := range held {
			s.release()
		}
	}()
	for _, s := range append(slices.Clone(l.sealed), l.live) {
		if s.calls == 0 || s.max < lo || s.min >= hi {
			continue
		}
		s.hold()
		held = append(held, s)
		if keep != nil {
			var err error
			if picked, err = l.keyBlocks(s, key, picked[:0]); err != nil {
				l.mu.RUnlock()
				return err
			}
		} else {
			picked = picked[:0]
			for bn := range s.blocks {
				picked = append(picked, uint32(bn))
			}
		}
		for _, bn := range picked {
			if r := s.blocks[bn]; r.max >= lo && r.min < hi {
				refs = append(refs, ref{s, bn, r})
			}
		}
	}
	l.mu.RUnlock()
	// Blocks by their earliest call, then in the order they were stored.
	slices.SortStableFunc(refs, func(a, b ref) int { return cmpInt(a.r.min, b.r.min) })
	var h cursors
	for next := 0; next < len(refs) || h.Len() > 0; {
		// Open every block that may hold a call before the earliest
		// one open.
		for next < len(refs) && (h.Len() == 0 || refs[next].r.min <= h[0].time()) {
			f := refs[next]
			l.mu.RLock()
			b, err := l.readBlock(f.s, f.bn)
			l.mu.RUnlock()
			if err != nil {
				return err
			}
			es := b.entries
			i, _ := slices.BinarySearchFunc(es, lo, func(e entry, t int64) int { return cmpInt(e.time, t) })
			j, _ := slices.BinarySearchFunc(es, hi, func(e entry, t int64) int { return cmpInt(e.time, t) })
			if i < j {
				heap.Push(&h, &cursor{s: f.s, es: es[i:j], seq: next})
			}
			next++
		}
		if h.Len() == 0 {
			continue
		}
		c := h[0]
		r, err := record(c.s, &c.es[0])
		if err != nil {
			return err
		}
		c.es = c.es[1:]
		if len(c.es) == 0 {
			heap.Pop(&h)
		} else {
			heap.Fix(&h, 0)
		}
		if keep != nil && !keep(r) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// cursor walks one block's calls in a scan.
type cursor struct {
	s   *segment
	es  []entry
	seq int // the block's rank in the scan: ties go to the earlier
}

func (c *cursor) time() int64 { return c.es[0].time }

type cursors []*cursor

func (h cursors) Len() int { return len(h) }
func (h cursors) Less(i, j int) bool {
	if a, b := h[i].time(), h[j].time(); a != b {
		return a < b
	}
	return h[i].seq < h[j].seq
}
func (h cursors) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *cursors) Push(x any)   { *h = append(*h, x.(*cursor)) }
func (h *cursors) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
