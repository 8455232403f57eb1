package calllog

import (
	"container/list"
	"errors"
	"fmt"
	"os"
	"sync"
)

// DefaultOpenFiles is the number of sealed segment files a Files keeps
// open when none is given.
const DefaultOpenFiles = 256

// Files keeps open the sealed segment files read last, for one log or
// shared by many (calllogs gives every tenant's log one): up to a bound,
// past which the least recently used file that no read holds is closed,
// and opened again by the next read of its segment. A log's live segment
// keeps its own file open (it is written), outside the bound, so a process
// holds one file per tenant plus the bound at most, whatever the segments
// retention keeps. Safe for concurrent use.
type Files struct {
	mu  sync.Mutex
	max int
	// lru holds the cached handles, the most recently used first.
	lru list.List
	// open counts the files open through the cache: cached, or held by a
	// read after the cache let them go; a live segment's own is not.
	open  int
	opens int64
}

// NewFiles returns a Files keeping up to max sealed segment files open
// (DefaultOpenFiles when max <= 0).
func NewFiles(max int) *Files {
	if max <= 0 {
		max = DefaultOpenFiles
	}
	return &Files{max: max}
}

// FilesStats describes a Files.
type FilesStats struct {
	// Open is the sealed segment files open now (live segments' not
	// counted); Max the bound.
	Open, Max int
	// Opens counts the files opened because a read found its segment's
	// closed: the cache's misses.
	Opens int64
}

// Stats returns the files open and opened.
func (c *Files) Stats() FilesStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return FilesStats{Open: c.open, Max: c.max, Opens: c.opens}
}

// handle is an open segment file and the reads holding it. Its fields are
// guarded by the Files' mu.
type handle struct {
	f    *os.File
	pins int
	// seg is the segment whose cached file it is (elem its place in the
	// lru); nil when it is not cached: a segment's own, or let go by the
	// cache while held, closed by the last release.
	seg  *segment
	elem *list.Element
}

// own makes f the segment's own file (the live segment's), kept open
// outside the bound until disown or drop.
func (c *Files) own(s *segment, f *os.File) {
	c.mu.Lock()
	s.own = &handle{f: f, pins: 1}
	c.mu.Unlock()
}

// acquire returns a handle of s's file for one read, which the caller
// gives back with release. A sealed segment's file is opened when the
// cache does not hold it; one that is gone (retention removed it and no
// hold kept it open) is an error matching ErrNoSegment, never another
// file's bytes: a file opened is checked to have the size the log knows.
func (c *Files) acquire(s *segment) (*handle, error) {
	c.mu.Lock()
	if h := c.held(s); h != nil {
		c.mu.Unlock()
		return h, nil
	}
	c.mu.Unlock()
	f, err := os.Open(s.path)
	if err == nil {
		var fi os.FileInfo
		if fi, err = f.Stat(); err == nil && fi.Size() < s.size {
			err = &CorruptError{Path: s.path, Offset: fi.Size(),
				Reason: fmt.Sprintf("the segment holds %d bytes, %d when the log was opened", fi.Size(), s.size)}
		}
		if err != nil {
			f.Close()
			f = nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Retention may have kept the file open for the holds on s (keep)
	// while this open ran, before it removed the file.
	if h := c.held(s); h != nil {
		if f != nil {
			f.Close()
		}
		return h, nil
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cannot read call log segment %s, removed since the log was opened (retention, or by hand): %w", s.path, ErrNoSegment)
		}
		return nil, fmt.Errorf("cannot read call log segment: %w", err)
	}
	c.opens++
	c.open++
	h := &handle{f: f, pins: 1}
	if !s.gone {
		h.seg, h.elem = s, c.lru.PushFront(h)
		s.cached = h
	}
	c.evict()
	return h, nil
}

// held returns s's file pinned once more when it is open: its own, or
// cached. The caller holds mu.
func (c *Files) held(s *segment) *handle {
	if h := s.own; h != nil {
		h.pins++
		return h
	}
	if h := s.cached; h != nil {
		h.pins++
		c.lru.MoveToFront(h.elem)
		return h
	}
	return nil
}

// release gives back a handle acquire returned.
func (c *Files) release(h *handle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unpin(h)
	c.evict()
}

// unpin drops a pin of h and closes it when it was the last and h is no
// longer cached nor owned. The caller holds mu.
func (c *Files) unpin(h *handle) {
	h.pins--
	if h.pins == 0 && h.seg == nil {
		h.f.Close()
		c.open--
	}
}

// evict closes the least recently used cached files no read holds while
// more than max are open. The caller holds mu.
func (c *Files) evict() {
	for e := c.lru.Back(); e != nil && c.open > c.max; {
		prev := e.Prev()
		if h := e.Value.(*handle); h.pins == 0 {
			c.uncache(h)
			h.f.Close()
			c.open--
		}
		e = prev
	}
}

// uncache takes h out of the cache (the caller closes it, or its last
// release does). The caller holds mu.
func (c *Files) uncache(h *handle) {
	c.lru.Remove(h.elem)
	h.seg.cached, h.seg, h.elem = nil, nil, nil
}

// disown moves the live segment s's own file, s being sealed, into the
// cache: the reads holding it keep it.
func (c *Files) disown(s *segment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := s.own
	if h == nil {
		return
	}
	s.own = nil
	c.open++
	if !s.gone {
		h.seg, h.elem = s, c.lru.PushFront(h)
		s.cached = h
	}
	c.unpin(h)
	c.evict()
}

// keep opens s's file for the holds on it (a scan, a snapshot), before
// retention removes it: it stays open until the last lets go (drop), and
// the cache keeps it no longer. Without a file to keep (the open fails)
// those reads fail with ErrNoSegment once they need it.
func (c *Files) keep(s *segment) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.gone = true
	if s.own != nil {
		return nil
	}
	if h := s.cached; h != nil {
		c.uncache(h)
		c.open--
		h.pins++
		s.own = h
		return nil
	}
	f, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("cannot keep call log segment %s open for its readers: %w", s.path, err)
	}
	s.own = &handle{f: f, pins: 1}
	return nil
}

// drop lets go of every file of s, which the log no longer lists: its own
// (closed unless a read holds it), and the cache's; a later read opens the
// file anew and the cache does not keep it.
func (c *Files) drop(s *segment) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.gone = true
	var err error
	if h := s.cached; h != nil {
		c.uncache(h)
		if h.pins == 0 {
			err = h.f.Close()
			c.open--
		}
	}
	if h := s.own; h != nil {
		s.own = nil
		h.pins--
		if h.pins == 0 {
			if cerr := h.f.Close(); err == nil {
				err = cerr
			}
		} else {
			// Held by a read: closed by its release, counted until then.
			c.open++
		}
	}
	return err
}
