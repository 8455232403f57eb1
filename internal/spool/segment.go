package spool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

// A segment is one file of the spool's log, NNNN.log (NNNN its id, which
// orders the segments): frames (spoolframe.go) one after the other, each
// exactly as a spool file of one batch would hold it. Nothing else is in
// the file: where a frame ends the next begins, and the file ends after the
// last one whose write started.
//
// The writer appends a frame and syncs it with fdatasync; the append is
// acknowledged after the sync. The file's directory entry was synced when
// the segment was created, before any frame went in, so one sync per
// acknowledgement suffices, and appends that wait for a sync in flight
// share the next one. A segment is never appended to again after a
// restart, after a failed write or sync, or once it passes the segment
// size; it is removed when none of its batches is left in the spool.
//
// Recovery (ScanSegment) walks the frames by their lengths. Bytes where no
// frame header is, or a frame whose checksum fails, followed by a whole
// frame, are damage in the middle: they become an entry of their own,
// which the drain sets aside as .rejected while the frames around it drain.
// The same with no whole frame after it is the torn tail of writes whose
// sync never returned: never acknowledged, it is cut off.
type segment struct {
	id   uint64
	path string
	// f is open while the segment may be appended to or synced; nil once
	// it is neither (a recovered segment, or a sealed one all synced).
	f *os.File
	// The fields below are guarded by the spool's mu.
	size   int64 // bytes written
	synced int64 // bytes known to be on disk
	live   int   // batches of the spool in this segment
	// failed is set when a write or sync failed: nothing after synced
	// can be trusted, and nothing more is appended.
	failed error
}

// read returns n bytes of the segment at off, in a buffer from spoolBufs.
func (g *segment) read(off, n int64) ([]byte, error) {
	f, err := os.Open(g.path)
	if err != nil {
		return nil, fmt.Errorf("cannot read spool segment: %w", err)
	}
	defer f.Close()
	data := getSpoolBuf(int(n))
	if _, err := f.ReadAt(data, off); err != nil {
		putSpoolBuf(data)
		return nil, fmt.Errorf("cannot read spool segment %s at byte %d: %w", g.path, off, err)
	}
	return data, nil
}

func (sp *Log[T]) segmentPath(id uint64) string {
	return filepath.Join(sp.dir, fmt.Sprintf("%0*d%s", seqWidth, id, SegExt))
}

// segmentFor returns the segment the next frame of n bytes goes to,
// starting a new one when the active one is full or failed; the caller
// holds mu.
func (sp *Log[T]) segmentFor(n int64) (*segment, error) {
	if a := sp.active; a != nil {
		if a.failed == nil && (a.size == 0 || a.size+n <= sp.segmentBytes) {
			return a, nil
		}
		sp.active = nil
		if a.live == 0 {
			_ = sp.retire(a) // best effort, as in forget
		} else if a.synced == a.size && a.f != nil {
			a.f.Close()
			a.f = nil
		}
	}
	seg := sp.spare
	sp.spare = nil
	if seg != nil && seg.id < sp.lastSeg {
		// Made before a segment that this one would follow.
		seg.f.Close()
		os.Remove(seg.path)
		seg = nil
	}
	if seg == nil {
		var err error
		id := sp.nextSeg
		sp.nextSeg++
		if seg, err = createSegment(sp.dir, id, sp.segmentPath(id)); err != nil {
			return nil, err
		}
	}
	sp.active, sp.lastSeg = seg, seg.id
	return seg, nil
}

// prepareSpare creates the segment the next rotation takes, so that the
// append that rotates does not wait for a file to be created and its
// directory synced.
func (sp *Log[T]) prepareSpare() {
	sp.mu.Lock()
	if sp.spare != nil {
		sp.mu.Unlock()
		return
	}
	id := sp.nextSeg
	sp.nextSeg++
	sp.mu.Unlock()
	seg, err := createSegment(sp.dir, id, sp.segmentPath(id))
	if err != nil {
		return
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.spare != nil || sp.closed || id < sp.lastSeg {
		seg.f.Close()
		os.Remove(seg.path)
		return
	}
	sp.spare = seg
}

// createSegment creates an empty segment file and syncs it and its
// directory: from then on, a sync of the file makes what was appended to it
// durable.
func createSegment(dir string, id uint64, path string) (*segment, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot create spool segment: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("cannot sync spool segment: %w", err)
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return &segment{id: id, path: path, f: f}, nil
}

// syncSegment syncs a segment's file; tests replace it to see or fail the
// syncs.
var syncSegment = fdatasync

// retire removes a segment none of whose batches is left; the caller holds
// mu. A crash before the removal reaches the disk only re-sends its
// batches.
func (sp *Log[T]) retire(g *segment) error {
	if sp.active == g {
		sp.active = nil
	}
	if g.f != nil {
		g.f.Close()
		g.f = nil
	}
	if err := os.Remove(g.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cannot remove spool segment: %w", err)
	}
	return nil
}

// sync returns once the bytes of g up to end are on disk. The first caller
// to find them not synced syncs everything written so far, for the callers
// that wrote meanwhile too (group commit).
func (sp *Log[T]) sync(g *segment, end int64) error {
	sp.syncMu.Lock()
	defer sp.syncMu.Unlock()
	sp.mu.Lock()
	if g.synced >= end {
		sp.mu.Unlock()
		return nil
	}
	if g.failed != nil {
		sp.mu.Unlock()
		return g.failed
	}
	target, f := g.size, g.f
	sp.mu.Unlock()
	err := syncSegment(f)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if err != nil {
		// After a failed sync the kernel may have dropped the pages it
		// could not write: a later sync that succeeds proves nothing.
		g.failed = sp.ioError("sync spool segment", g.path, err)
		return g.failed
	}
	g.synced = target
	if g != sp.active && g.synced == g.size && g.f != nil {
		g.f.Close()
		g.f = nil
	}
	return nil
}

// recoverSegment lists the frames of a segment left by an earlier run and
// cuts off its torn tail; an empty segment is removed.
func (sp *Log[T]) recoverSegment(id uint64) error {
	path := sp.segmentPath(id)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("cannot open spool segment: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cannot stat spool segment: %w", err)
	}
	refs, end, err := ScanSegment(f, info.Size(), sp.readLimit())
	if err != nil {
		return fmt.Errorf("cannot read spool segment %s: %w", path, err)
	}
	if end < info.Size() {
		// Appended after the last sync that returned: never acknowledged,
		// unless it is the last frame damaged after its sync, or a file of
		// someone else's under a segment's name, which look the same. So
		// the bytes are kept in a file of their own before they are cut.
		// When they cannot be kept (a full disk, where a write that failed
		// for space leaves such a tail), they stay where they are: the
		// segment is never appended to again, and the drain reads it by
		// the offsets of its frames.
		t := TornTail{Path: path, At: end, Bytes: info.Size() - end}
		if t.Kept, t.KeepErr = keepTorn(sp.dir, path, f, end, t.Bytes); t.KeepErr == nil {
			if err := f.Truncate(end); err != nil {
				return fmt.Errorf("cannot cut the torn tail of spool segment %s: %w", path, err)
			}
		}
		sp.torn = append(sp.torn, t)
	}
	if len(refs) == 0 {
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("cannot remove empty spool segment: %w", err)
		}
		return nil
	}
	g := &segment{id: id, path: path, size: end, synced: end, live: len(refs)}
	for _, r := range refs {
		sp.entries = append(sp.entries, spoolEntry{seq: sp.next, seg: g, off: r.Off, size: r.Size, damage: r.Damage})
		sp.bytes += r.Size
		sp.next++
	}
	return nil
}

// TornTail is what recovery cut off the end of a segment, and the file
// that keeps its bytes.
type TornTail struct {
	Path      string
	At, Bytes int64
	Kept      string
	KeepErr   error // why it could not be kept; then it was left in place
}

// keepTorn keeps a torn tail; tests replace it to fail.
var keepTorn = keepTail

// keepTail copies the n bytes of segment f (at path) from off to a new
// file beside it, NNNN.log.TIME.torn, synced with its directory, and
// returns its path. The spool never reads such a file: it is for a person.
func keepTail(dir, path string, f *os.File, off, n int64) (string, error) {
	kept := fmt.Sprintf("%s.%d%s", path, time.Now().UnixNano(), TornExt)
	out, err := os.OpenFile(kept, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("cannot keep the torn tail of spool segment %s: %w", path, err)
	}
	_, err = io.Copy(out, io.NewSectionReader(f, off, n))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		os.Remove(kept)
		return "", fmt.Errorf("cannot keep the torn tail of spool segment %s (%d bytes at byte %d) in %s: %w", path, n, off, kept, err)
	}
	return kept, nil
}

// FrameRef is a frame found in a segment, or a damaged region between two.
type FrameRef struct {
	Off, Size int64
	Damage    *CorruptError
}

// ScanSegment walks the frames of a segment of size bytes and returns them
// in order, with end, where the whole frames end: what follows is a torn
// tail. See segment for what recovery trusts.
func ScanSegment(r io.ReaderAt, size, limit int64) (refs []FrameRef, end int64, err error) {
	var hdr [frameHeaderLen]byte
	// frameLen returns the length of the frame whose header is at off,
	// or 0 when none is there or it would pass the end of the file.
	frameLen := func(off int64) (int64, error) {
		if size-off < int64(frameHeaderLen) {
			return 0, nil
		}
		if _, err := r.ReadAt(hdr[:], off); err != nil {
			return 0, err
		}
		if !bytes.Equal(hdr[:frameLenAt], []byte(spoolMagic)) {
			return 0, nil
		}
		n := int64(binary.LittleEndian.Uint32(hdr[frameLenAt:]))
		if n > min(limit, maxFrameRaw) || n > size-off-int64(frameHeaderLen) {
			return 0, nil
		}
		return int64(frameHeaderLen) + n, nil
	}
	// whole reports whether the frame of n bytes at off has the checksum
	// its header says.
	whole := func(off, n int64) (bool, error) {
		data := getSpoolBuf(int(n))
		defer putSpoolBuf(data)
		if _, err := r.ReadAt(data, off); err != nil {
			return false, err
		}
		want := binary.LittleEndian.Uint32(data[frameSumAt:])
		return crc32.Update(crc32.Checksum(data[:frameSumAt], castagnoli), castagnoli, data[frameHeaderLen:]) == want, nil
	}
	off := int64(0)
	checked := -1 // refs up to this index are known whole
	for {
		for off < size {
			n, err := frameLen(off)
			if err != nil {
				return nil, 0, err
			}
			if n == 0 {
				break
			}
			refs = append(refs, FrameRef{Off: off, Size: n})
			off += n
		}
		// A length is trusted without its checksum, except the last
		// one's: a torn write can leave a whole header and a partial
		// block, and a damaged length leads the walk astray right after.
		if k := len(refs) - 1; k > checked && refs[k].Damage == nil {
			ok, err := whole(refs[k].Off, refs[k].Size)
			if err != nil {
				return nil, 0, err
			}
			if !ok {
				off = refs[k].Off
				refs = refs[:k]
			}
			checked = len(refs) - 1
		}
		if off >= size {
			return refs, size, nil
		}
		next, n, err := nextWholeFrame(r, off+1, size, limit)
		if err != nil {
			return nil, 0, err
		}
		if next < 0 {
			return refs, off, nil
		}
		refs = append(refs, FrameRef{Off: off, Size: next - off, Damage: &CorruptError{Offset: off,
			Reason: fmt.Sprintf("%d bytes that are no whole frame, up to the whole frame at byte %d", next-off, next)}})
		refs = append(refs, FrameRef{Off: next, Size: n})
		checked = len(refs) - 1
		off = next + n
	}
}

// nextWholeFrame returns where the first whole frame (its header and
// checksum right) at or after from starts, and its length; next is -1 when
// there is none.
func nextWholeFrame(r io.ReaderAt, from, size, limit int64) (next, n int64, err error) {
	if from >= size {
		return -1, 0, nil
	}
	data := make([]byte, size-from)
	if _, err := r.ReadAt(data, from); err != nil {
		return 0, 0, err
	}
	for i := 0; ; {
		j := bytes.Index(data[i:], []byte(spoolMagic))
		if j < 0 {
			return -1, 0, nil
		}
		at := i + j
		if rest := data[at:]; len(rest) >= frameHeaderLen {
			n := int64(binary.LittleEndian.Uint32(rest[frameLenAt:]))
			if n <= min(limit, maxFrameRaw) && n <= int64(len(rest)-frameHeaderLen) {
				frame := rest[:int64(frameHeaderLen)+n]
				want := binary.LittleEndian.Uint32(frame[frameSumAt:])
				if crc32.Update(crc32.Checksum(frame[:frameSumAt], castagnoli), castagnoli, frame[frameHeaderLen:]) == want {
					return from + int64(at), int64(frameHeaderLen) + n, nil
				}
			}
		}
		i = at + 1
	}
}

// Close releases the spool's files: the spare segment is removed, and so
// is the active one when none of its batches is left. A segment some of
// whose batches the drain already has is copied without them, so that the
// next start does not send them again. The caller appends and drains no
// more.
func (sp *Log[T]) Close() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.closed = true
	if g := sp.spare; g != nil {
		g.f.Close()
		os.Remove(g.path)
		sp.spare = nil
	}
	if g := sp.active; g != nil && g.live == 0 {
		sp.retire(g)
	}
	sp.active = nil
	var segs []*segment
	live := map[*segment][]spoolEntry{}
	for _, e := range sp.entries {
		if e.seg == nil {
			continue
		}
		if e.seg.f != nil {
			e.seg.f.Close()
			e.seg.f = nil
		}
		if live[e.seg] == nil {
			segs = append(segs, e.seg)
		}
		live[e.seg] = append(live[e.seg], e)
	}
	for _, g := range segs {
		sp.compact(g, live[g])
	}
}

// compact copies the batches es of segment g, all that is left of it, to a
// new segment and removes g, when g also holds batches the drain has; the
// caller holds mu. Best effort: on any failure g stays, and the next start
// sends its drained batches again, which is harmless. A segment with a
// damaged region stays as it is, so that recovery finds the damage where
// it was and sets it aside again.
func (sp *Log[T]) compact(g *segment, es []spoolEntry) {
	var n int64
	for _, e := range es {
		if e.damage != nil {
			return
		}
		n += e.size
	}
	if n == g.size {
		return
	}
	id := sp.nextSeg
	sp.nextSeg++
	path := sp.segmentPath(id)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return
	}
	ok := func() bool {
		for _, e := range es {
			data, err := g.read(e.off, e.size)
			if err != nil {
				return false
			}
			_, err = f.Write(data)
			putSpoolBuf(data)
			if err != nil {
				return false
			}
		}
		// The copy is durable before the original goes.
		return f.Sync() == nil && syncDir(sp.dir) == nil
	}()
	f.Close()
	if !ok {
		os.Remove(path)
		return
	}
	os.Remove(g.path)
}

// writeSynced writes data to a new file at path and syncs it and dir.
func writeSynced(dir, path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("cannot create spool file: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("cannot write spool file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("cannot sync spool file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("cannot close spool file: %w", err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	if err := datadir.SyncDir(dir); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	return nil
}
