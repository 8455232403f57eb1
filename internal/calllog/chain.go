package calllog

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"time"

	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// BlockInfo describes one block of a segment: where it is, what it holds,
// and the SHA-256 of its bytes (header and compressed body) as written.
type BlockInfo struct {
	Segment uint64 // the segment's number, which orders the segments
	Block   int    // the block's rank in its segment, from 0
	Offset  int64  // where the block starts in the segment file
	Size    int    // bytes, header included
	Calls   int
	// First and Last are the earliest and latest call times it holds.
	First, Last time.Time
	SHA256      [sha256.Size]byte
}

func blockInfo(seg uint64, bn uint32, r blockRef, sum [sha256.Size]byte) BlockInfo {
	return BlockInfo{Segment: seg, Block: int(bn), Offset: r.off, Size: int(r.size), Calls: int(r.count),
		First: sqlite.NanosTime(r.min), Last: sqlite.NanosTime(r.max), SHA256: sum}
}

// SegmentInfo describes one segment of the log.
type SegmentInfo struct {
	Segment uint64
	Sealed  bool // false for the live segment, the last
	Blocks  int
	Calls   int
	// First and Last are the earliest and latest call times it holds,
	// zero when it holds none.
	First, Last time.Time
}

// Segments returns the log's segments in order, the live one last.
func (l *Log) Segments() ([]SegmentInfo, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.live == nil {
		return nil, ErrClosed
	}
	var out []SegmentInfo
	for _, s := range append(slices.Clone(l.sealed), l.live) {
		si := SegmentInfo{Segment: s.num, Sealed: s != l.live, Blocks: len(s.blocks), Calls: s.calls}
		if s.calls > 0 {
			si.First, si.Last = sqlite.NanosTime(s.min), sqlite.NanosTime(s.max)
		}
		out = append(out, si)
	}
	return out, nil
}

// SegmentPath returns the path of segment seg's file.
func (l *Log) SegmentPath(seg uint64) string { return l.segPath(seg) }

// BlockHashes calls fn with each block of segment seg in order, its
// SHA-256 computed from the bytes the file holds now (what `verify`
// compares with the hashes OnBlock gave at commit: a changed byte changes
// it). The blocks are those the segment held when it was called; the
// block's own checksum is not checked, so damage shows as a hash that
// differs, not as an error. It returns ErrNoSegment for a segment the log
// does not hold.
func (l *Log) BlockHashes(ctx context.Context, seg uint64, fn func(BlockInfo) error) error {
	l.mu.RLock()
	if l.live == nil {
		l.mu.RUnlock()
		return ErrClosed
	}
	var s *segment
	for _, c := range append(slices.Clone(l.sealed), l.live) {
		if c.num == seg {
			s = c
		}
	}
	if s == nil {
		l.mu.RUnlock()
		return fmt.Errorf("cannot hash the blocks of segment %d: %w", seg, ErrNoSegment)
	}
	s.hold()
	blocks := slices.Clone(s.blocks)
	l.mu.RUnlock()
	defer s.release()
	if len(blocks) == 0 {
		return nil // a read-only log's empty live segment may have no file
	}
	h, err := s.files.acquire(s)
	if err != nil {
		return err
	}
	defer s.files.release(h)
	var buf []byte
	for bn, r := range blocks {
		if err := ctx.Err(); err != nil {
			return err
		}
		buf = slices.Grow(buf[:0], int(r.size))[:r.size]
		if _, err := h.f.ReadAt(buf, r.off); err != nil {
			return fmt.Errorf("cannot read call log %s at byte %d: %w", s.path, r.off, err)
		}
		if err := fn(blockInfo(s.num, uint32(bn), r, sha256.Sum256(buf))); err != nil {
			return err
		}
	}
	return nil
}
