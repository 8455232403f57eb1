package calllog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/internal/spool"
)

// load opens the segments of the directory: every one but the last is
// sealed, and read from its index (indexed again when the index is missing
// or damaged); the last is live unless it has an index, and is recovered:
// its torn tail cut, its id table rebuilt from its blocks.
func (l *Log) load() error {
	names, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("cannot open call log %s: %w", l.dir, err)
	}
	var nums []uint64
	idx := map[uint64]bool{}
	for _, e := range names {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, tmpExt):
			// An index whose write did not complete (or, read-only, is
			// being written).
			if !l.opts.ReadOnly {
				path := filepath.Join(l.dir, name)
				l.change(func() error { os.Remove(path); return nil })
			}
		case strings.HasSuffix(name, segExt) || strings.HasSuffix(name, idxExt):
			ext := filepath.Ext(name)
			n, err := strconv.ParseUint(strings.TrimSuffix(name, ext), 10, 64)
			if err != nil || len(name)-len(ext) != segNameDigits {
				continue
			}
			if ext == segExt {
				nums = append(nums, n)
			} else {
				idx[n] = true
			}
		}
	}
	slices.Sort(nums)
	for n := range idx {
		if _, ok := slices.BinarySearch(nums, n); !ok && !l.opts.ReadOnly {
			// Retention removed its segment before it.
			path := idxPath(l.segPath(n))
			l.change(func() error { os.Remove(path); return nil })
		}
	}
	buf := make([]byte, 1<<20) // reads the indexes
	for i, n := range nums {
		last := i == len(nums)-1
		live := last && !idx[n]
		if last && idx[n] && l.staleIndex(n, buf) {
			// A seal that failed after its index reached the disk, the
			// segment appended to since: it is live, the index goes.
			if !l.opts.ReadOnly {
				path := idxPath(l.segPath(n))
				err := l.change(func() error {
					if err := os.Remove(path); err != nil {
						return fmt.Errorf("cannot open call log %s: %w", l.dir, err)
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			live = true
		}
		s, err := l.openSegment(n, live, buf)
		if l.opts.ReadOnly && errors.Is(err, os.ErrNotExist) {
			continue // retention removed it since the directory was read
		}
		if err != nil {
			return err
		}
		if s.ids != nil && (l.opts.ReadOnly && !last || l.deferring && !live) {
			// Read from its blocks (its index not written yet, or
			// damaged): sealed, its tables in memory (until Start
			// writes its index, deferred; one of no call is let go,
			// as below).
			if l.opts.ReadOnly || s.calls > 0 {
				l.sealed = append(l.sealed, s)
			} else {
				s.release()
			}
			continue
		}
		if s.ids != nil {
			l.live = s
		} else if s.calls > 0 {
			l.sealed = append(l.sealed, s)
		} else {
			s.release()
		}
	}
	if l.live == nil {
		next := uint64(1)
		if len(nums) > 0 {
			next = nums[len(nums)-1] + 1
		}
		if l.opts.ReadOnly || l.deferring {
			// An empty live segment of no file: nothing to read (until
			// Start creates it, deferred).
			s := &segment{num: next, path: l.segPath(next), files: l.opts.Files}
			newSegmentState(s)
			l.live = s
			if l.opts.ReadOnly {
				return nil
			}
		}
		return l.change(func() error {
			s, err := l.createSegment(next)
			if err != nil {
				return err
			}
			l.mu.Lock()
			old := l.live
			l.live = s
			l.mu.Unlock()
			if old != nil {
				old.release()
			}
			return nil
		})
	}
	return nil
}

// staleIndex tells whether segment num's index, whole, names fewer bytes
// of blocks than the segment holds.
func (l *Log) staleIndex(num uint64, buf []byte) bool {
	path := l.segPath(num)
	blocks, why, err := readIndexHead(idxPath(path), buf)
	fi, serr := os.Stat(path)
	if err != nil || why != "" || serr != nil {
		return false
	}
	return fi.Size() > indexedEnd(blocks)
}

// indexedEnd is where the last of blocks ends: the size of a sealed
// segment (of one with no block, whose header is 8 bytes before seal52 and
// segHeadLen since, the longer).
func indexedEnd(blocks []blockRef) int64 {
	if len(blocks) == 0 {
		return segHeadLen
	}
	r := blocks[len(blocks)-1]
	return r.off + int64(r.size)
}

// openSegment opens segment num: live, recovered as the segment appended
// to next, its file kept open (it is written, and read through it); or
// sealed, with the time index of its index file (its tables are read when
// a lookup needs them), its checksum checked through buf, its file opened
// when a read needs it (Files).
func (l *Log) openSegment(num uint64, live bool, buf []byte) (*segment, error) {
	path := l.segPath(num)
	s := &segment{num: num, path: path, files: l.opts.Files}
	newSegmentState(s)
	if live {
		flag := os.O_RDONLY
		if !l.opts.ReadOnly {
			flag = os.O_RDWR
		}
		f, err := os.OpenFile(path, flag, 0)
		if err != nil {
			return nil, fmt.Errorf("cannot open call log segment: %w", err)
		}
		s.f = f
		l.opts.Files.own(s, f)
	} else {
		fi, err := os.Stat(path)
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("%s is not a file", path)
		}
		if err != nil {
			return nil, fmt.Errorf("cannot open call log segment: %w", err)
		}
		blocks, why, rerr := readIndexHead(idxPath(path), buf)
		if rerr == nil {
			if end := indexedEnd(blocks); why == "" && fi.Size() < end {
				// Whole (checksummed) and naming more bytes than the
				// segment holds: synced blocks are gone, not a torn
				// write (a sealed segment's last block was synced
				// before its index was written). Indexing it again
				// would hide the loss.
				return nil, &CorruptError{Path: path, Offset: fi.Size(), Reason: fmt.Sprintf(
					"the segment holds %d bytes, its index %s names %d: blocks synced and indexed are missing (%s)",
					fi.Size(), filepath.Base(idxPath(path)), end, lostBlocks(blocks, fi.Size()))}
			} else if why == "" && fi.Size() != end && !(len(blocks) == 0 && fi.Size() == int64(len(segMagic))) {
				why = fmt.Sprintf("it names %d bytes of blocks, the segment holds %d", end, fi.Size())
			}
			if why == "" {
				s.blocks, s.ids, s.more, s.keys = blocks, nil, nil, nil
				for _, r := range blocks {
					s.calls += int(r.count)
					s.min, s.max = minInt(s.min, r.min), maxInt(s.max, r.max)
				}
				s.size = fi.Size()
				return s, nil
			}
		} else if !errors.Is(rerr, os.ErrNotExist) {
			return nil, fmt.Errorf("cannot open call log index: %w", rerr)
		}
		// Indexed again below, from the segment, which must be whole.
	}
	if err := l.recover(s, live); err != nil {
		s.release()
		return nil, err
	}
	if !live && !l.opts.ReadOnly {
		if l.deferring {
			// Sealed by Start: its tables stay in memory until then.
			l.change(func() error { return l.seal(s) })
		} else if err := l.seal(s); err != nil {
			s.release()
			return nil, err
		}
	}
	return s, nil
}

// lostBlocks says which of blocks a segment of size bytes lacks: how many
// and their calls.
func lostBlocks(blocks []blockRef, size int64) string {
	n, calls := 0, 0
	for _, r := range blocks {
		if r.off+int64(r.size) > size {
			n++
			calls += int(r.count)
		}
	}
	return fmt.Sprintf("%d of its %d blocks, %d calls", n, len(blocks), calls)
}

// recover reads s's blocks, and their ids into its live id table. In a
// live segment a damaged block with no whole block after it is a torn tail
// (a write whose sync never returned, so never acknowledged): the file is
// cut before it. Any other damage is a *CorruptError.
func (l *Log) recover(s *segment, live bool) error {
	data, err := os.ReadFile(s.path)
	if err != nil {
		return fmt.Errorf("cannot read call log segment: %w", err)
	}
	corrupt := func(off int, why string) error {
		return &CorruptError{Path: s.path, Offset: int64(off), Reason: why}
	}
	off, created, torn := readSegHead(data)
	if off == 0 {
		if !torn {
			return corrupt(0, fmt.Sprintf("unknown header %q", data[:min(len(data), len(segMagic))]))
		}
		if !live {
			return corrupt(0, "the file ends inside its header")
		}
		if l.opts.ReadOnly {
			// Being created: no call yet.
			s.size, s.created = 0, l.opts.Now()
			return nil
		}
		// Created, its header never synced: write it again.
		now := l.opts.Now()
		s.size, s.created = segHeadLen, now
		return l.change(func() error {
			err := s.f.Truncate(0)
			if err == nil {
				_, err = s.f.WriteAt(segHeader(now), 0)
			}
			if err == nil {
				err = s.f.Sync()
			}
			if err != nil {
				return fmt.Errorf("cannot repair call log segment %s: %w", s.path, err)
			}
			return nil
		})
	}
	for off < len(data) {
		var h head
		why := fmt.Sprintf("the file ends inside a block header (%d of %d bytes)", len(data)-off, blockHeadLen)
		if len(data)-off >= blockHeadLen {
			h, why = checkBlock(data[off:])
		}
		if why != "" {
			if at := wholeBlockAfter(data, off+1); at >= 0 {
				return corrupt(off, fmt.Sprintf("%s, and a whole block follows at byte %d", why, at))
			}
			if !live {
				return corrupt(off, why+" in a sealed segment")
			}
			if l.opts.ReadOnly {
				break // being written, or torn: not read, not cut
			}
			at, cut := int64(off), int64(len(data)-off)
			err := l.change(func() error {
				if err := s.f.Truncate(at); err != nil {
					return fmt.Errorf("cannot cut the torn tail of call log segment %s at byte %d: %w", s.path, at, err)
				}
				if err := spool.Fdatasync(s.f); err != nil {
					return fmt.Errorf("cannot cut the torn tail of call log segment %s at byte %d: %w", s.path, at, err)
				}
				if l.opts.OnTornTail != nil {
					l.opts.OnTornTail(s.path, at, cut)
				}
				return nil
			})
			if err != nil {
				return err
			}
			break
		}
		size := blockHeadLen + int(h.bodyLen)
		b, err := decodeBlock(data[off:off+size], h)
		if err != nil {
			return corrupt(off, err.Error())
		}
		bn := uint32(len(s.blocks))
		s.blocks = append(s.blocks, blockRef{off: int64(off), size: uint32(size), count: h.count, min: h.min, max: h.max})
		s.calls += int(h.count)
		s.min, s.max = minInt(s.min, h.min), maxInt(s.max, h.max)
		for i := range b.entries {
			r, err := record(s, &b.entries[i])
			if err != nil {
				return corrupt(off, err.Error())
			}
			s.add(idHash(b.entries[i].id), recordKeys(r), bn)
		}
		off += size
	}
	s.size = int64(off)
	// The age of a recovered segment counts from its creation, as its
	// header records it. A segment of a release before seal52 records
	// none: its age is unknown, past any bound when it holds a block (it
	// is sealed once the committer starts), and counted from this open
	// when it holds none. A time ahead of the clock (a clock set back)
	// is taken as unknown too, so that it cannot hold the seal off.
	switch {
	case created.IsZero() && len(s.blocks) == 0, created.After(l.opts.Now()) && len(s.blocks) == 0:
		s.created = l.opts.Now()
	case created.After(l.opts.Now()):
		s.created = time.Time{}
	default:
		s.created = created
	}
	return nil
}

// segHeader returns the header of a segment created at t.
func segHeader(t time.Time) []byte {
	b := make([]byte, segHeadLen)
	copy(b, segMagic2)
	binary.LittleEndian.PutUint64(b[len(segMagic2):], uint64(t.UnixNano()))
	return b
}

// readSegHead reads the header at the start of a segment's data: its
// length and the creation time it records (zero for a header of a release
// before seal52, segMagic alone). off is 0 when data holds no whole
// header: torn says whether data is the start of one (a header whose
// write never completed) rather than another file's.
func readSegHead(data []byte) (off int, created time.Time, torn bool) {
	switch {
	case bytes.HasPrefix(data, []byte(segMagic)):
		return len(segMagic), time.Time{}, false
	case len(data) >= segHeadLen && bytes.HasPrefix(data, []byte(segMagic2)):
		return segHeadLen, time.Unix(0, int64(binary.LittleEndian.Uint64(data[len(segMagic2):]))), false
	}
	return 0, time.Time{}, bytes.HasPrefix([]byte(segMagic), data) || bytes.HasPrefix([]byte(segMagic2), data) ||
		bytes.HasPrefix(data, []byte(segMagic2))
}

// wholeBlockAfter returns the offset of the first whole, checksummed block
// at or after from, or -1.
func wholeBlockAfter(data []byte, from int) int {
	for from < len(data) {
		i := bytes.Index(data[from:], []byte(blockMagic))
		if i < 0 {
			return -1
		}
		at := from + i
		if len(data)-at >= blockHeadLen {
			if _, why := checkBlock(data[at:]); why == "" {
				return at
			}
		}
		from = at + 1
	}
	return -1
}
