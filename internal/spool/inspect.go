package spool

import "os"

// This file holds what the stores' tests look at and replace; nothing
// else uses it.

// Torn returns the tails recovery cut off segments at Open, for the store
// to log.
func (sp *Log[T]) Torn() []TornTail { return sp.torn }

// Dir returns the spool's directory.
func (sp *Log[T]) Dir() string { return sp.dir }

// State is a snapshot of a spool's bookkeeping.
type State struct {
	// Entries counts the batches listed, synced or not.
	Entries int
	// Kept counts the batches kept in memory, KeptRows their rows and
	// KeptBytes their size for KeepBytes (0 without a bound).
	Kept, KeptRows int
	KeptBytes      int64
	// ActiveSize is the size of the segment appended to (0 when none);
	// Active and Spare say whether there is one, and a spare.
	ActiveSize    int64
	Active, Spare bool
	// ActiveID and SpareID are their ids.
	ActiveID, SpareID uint64
}

// State returns a snapshot of the spool's bookkeeping.
func (sp *Log[T]) State() State {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	st := State{Entries: len(sp.entries), Kept: len(sp.kept), KeptRows: sp.keptRows, KeptBytes: sp.keptBytes}
	if sp.active != nil {
		st.Active, st.ActiveSize, st.ActiveID = true, sp.active.size, sp.active.id
	}
	if sp.spare != nil {
		st.Spare, st.SpareID = true, sp.spare.id
	}
	return st
}

// IsKept reports whether the batch of seq is kept in memory as b.
func (sp *Log[T]) IsKept(seq uint64) (T, bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	b, ok := sp.kept[seq]
	return b, ok
}

// Frame returns the segment file and the offset and size of the frame of
// seq; ok is false when seq is not in a segment.
func (sp *Log[T]) Frame(seq uint64) (path string, off, size int64, ok bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	i, found := sp.find(seq)
	if !found || sp.entries[i].seg == nil {
		return "", 0, 0, false
	}
	e := sp.entries[i]
	return e.seg.path, e.off, e.size, true
}

// SetSegmentBytes sets the size past which the next append starts a new
// segment.
func (sp *Log[T]) SetSegmentBytes(n int64) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.segmentBytes = n
}

// SetSync replaces the sync of a segment's file (fdatasync) until the
// returned function restores it: tests see or fail the syncs with it.
func SetSync(f func(*os.File) error) (restore func()) {
	old := syncSegment
	syncSegment = f
	return func() { syncSegment = old }
}

// Fdatasync is the sync SetSync replaces.
func Fdatasync(f *os.File) error { return fdatasync(f) }

// SetKeepTorn replaces how recovery keeps a torn tail (keepTail) until
// the returned function restores it: tests fail it with this.
func SetKeepTorn(f func(dir, path string, seg *os.File, off, n int64) (string, error)) (restore func()) {
	old := keepTorn
	keepTorn = f
	return func() { keepTorn = old }
}

// PutBuf returns a buffer of EncodeFrame for reuse.
func PutBuf(b []byte) { putSpoolBuf(b) }

// Magic and MagicV1 start a frame of this version and of version 1.
const (
	Magic   = spoolMagic
	MagicV1 = spoolMagicV1
)

// The layout of a frame's header (frame.go), for tests that damage one.
const (
	FrameHeaderLen = frameHeaderLen
	FrameLenAt     = frameLenAt
	FrameSumAt     = frameSumAt
)

// Castagnoli is the CRC-32C table of the frames' checksums.
var Castagnoli = castagnoli

// KeepTail is how recovery keeps a torn tail by default.
func KeepTail(dir, path string, f *os.File, off, n int64) (string, error) {
	return keepTail(dir, path, f, off, n)
}

// SegmentPath returns the path of the segment id in dir.
func SegmentPath(dir string, id uint64) string {
	return (&Log[struct{}]{dir: dir}).segmentPath(id)
}

// FilePath returns the path of seq with the extension ext in dir.
func FilePath(dir string, seq uint64, ext string) string {
	return (&Log[struct{}]{dir: dir}).Path(seq, ext)
}

// Damaged reports whether the entry of seq is a damaged region recovery
// found between two frames.
func (sp *Log[T]) Damaged(seq uint64) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	i, ok := sp.find(seq)
	return ok && sp.entries[i].damage != nil
}
