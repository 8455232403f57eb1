package spool

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

var (
	// ErrFull is returned by Log.Append when the batch would pass the
	// spool's size limit with the batches it holds: it fits once they are
	// drained.
	ErrFull = errors.New("spool full")
	// ErrTooLarge is returned by Log.Append (and EncodeFrame) for a batch
	// larger than the spool's whole limit: it never fits, however much is
	// drained.
	ErrTooLarge = errors.New("batch too large for the spool")
	// ErrCorrupt is matched by the error of a spool file that cannot be
	// trusted (a *CorruptError): cut short, a checksum that does not
	// match, a length past the spool's limit, an unknown header.
	ErrCorrupt = errors.New("corrupt spool file")
	// ErrCodec is matched by the error of a batch encoding that ends
	// early, holds more than its batch, or a count or value no writer
	// makes (a *CorruptError with InBatch set).
	ErrCodec = errors.New("malformed spool batch")
)

// Codec encodes the batches of one store for its spool. Its methods are
// called concurrently.
type Codec[T any] interface {
	// Size estimates the length of v's encoding, so that the buffer is
	// allocated once.
	Size(v T) int
	// Append appends the encoding of v to dst.
	Append(dst []byte, v T) []byte
	// Decode decodes what Append encoded. Damage is a *CorruptError with
	// InBatch set, its Offset in raw.
	Decode(raw []byte) (T, error)
	// DecodeLegacy decodes a file of a store's releases before the
	// spool's frames ("\x00mcsp1\n" excepted, which Decode reads), or
	// returns a *CorruptError when there are none.
	DecodeLegacy(data []byte) (T, error)
	// Rows counts the rows of v, for the batches kept in memory.
	Rows(v T) int
}

// Log keeps acknowledged batches on local disk until their store has them:
// the ClickHouse store's while ClickHouse is unreachable, and with ack "log"
// (either store) every batch. It is an append-only log of
// segment files (segment.go): each batch is one frame (frame.go)
// appended to the active segment and synced with fdatasync before its
// append returns; appends that arrive while a sync is in flight share the
// next one (group commit). A segment is created and its directory synced
// ahead of the appends that use it, so that an acknowledgement waits for
// one sync. Batches are drained oldest first and forgotten once the store
// has them; a segment is removed once every batch in it is, so a crash
// between an insert and the removal only re-sends batches, which the
// store must recognize (ClickHouse's deduplication token or stored-row
// check, the embedded store's unique call key).
//
// Files of earlier releases, one batch per NNNN.batch file, are still
// read and drained before the segments.
type Log[T any] struct {
	codec    Codec[T]
	dir      string
	maxBytes int64
	// limitKey names maxBytes' setting in errors (LimitKey).
	limitKey string
	// segmentBytes is the size past which the next append starts a new
	// segment.
	segmentBytes int64

	// syncMu is held by the append syncing the active segment: the appends
	// that write their frames meanwhile wait for it, and the first of them
	// syncs for all (group commit).
	syncMu sync.Mutex

	mu      sync.Mutex
	entries []spoolEntry // oldest first, by seq
	bytes   int64
	next    uint64
	nextSeg uint64
	lastSeg uint64   // the newest segment appended to
	active  *segment // appended to; nil until an append needs one
	spare   *segment // created and directory-synced ahead of the next rotation
	// fresh holds the batches appended by this process that no insert
	// has been tried with: ClickHouse cannot have their rows, so their
	// first insert needs no check for rows already stored.
	fresh map[uint64]bool
	// kept holds the batches appended by this process, as appended, while
	// they and the ones before them hold at most keepRows rows, so that
	// the drain does not read and decode again what it has just encoded
	// (with ack "log" every acknowledged batch passes through here). The
	// files stay the record; a batch not kept is read from its file.
	kept     map[uint64]T
	keptRows int
	keepRows int
	// keptBytes and keepBytes are the same in keepSize's measure of the
	// batches (KeepBytes); keepBytes 0 bounds nothing.
	keptBytes, keepBytes int64
	keepSize             func(T) int64
	// torn lists the tails recovery cut off segments, for the store to log.
	torn   []TornTail
	closed bool
}

// spoolEntry is one batch in the spool.
type spoolEntry struct {
	seq uint64
	// seg holds the batch's frame at off; nil for a file of its own
	// (NNNN.batch, written by earlier releases).
	seg       *segment
	off, size int64
	// pending is set from the write of the frame until the sync that
	// makes it durable: the drain does not take it, nor anything after
	// it, before its append is acknowledged.
	pending bool
	// damage, when set, says why the bytes at off are no frame: a region
	// that recovery found between two frames (spoolseg.go).
	damage *CorruptError
}

// spoolBufs holds encoding buffers between appends: a batch of calls is
// megabytes, and an acknowledgement should not wait for them to be
// allocated and cleared again.
var spoolBufs sync.Pool

func getSpoolBuf(n int) []byte {
	if p, ok := spoolBufs.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]byte, n)
}

func putSpoolBuf(b []byte) { spoolBufs.Put(&b) }

// The names of the files in a spool's directory: NNNN and an extension.
const (
	// Ext ends a file of one batch, of an earlier release.
	Ext = ".batch"
	// SegExt ends a segment.
	SegExt = ".log"
	// TmpExt ends a file being written, never acknowledged.
	TmpExt = ".tmp"
	// BadExt ends a batch set aside for a person.
	BadExt = ".rejected"
	// TornExt ends the files that keep what recovery cut off the end of a
	// segment (keepTail); nothing reads them.
	TornExt  = ".torn"
	seqWidth = 20
	// defaultSegmentBytes is the size of a segment before the next append
	// starts another: large enough that creating one (and syncing the
	// directory) is rare, small enough that a crash re-sends little.
	defaultSegmentBytes = 8 << 20
)

// Open opens (creating) dir, removes unfinished temporary files and
// lists the batches left by an earlier run: the files of earlier releases,
// then the frames of each segment (a torn tail, never acknowledged, is cut
// off). Up to keepRows rows of the batches appended from now on are also
// kept in memory for read.
func Open[T any](dir string, maxBytes int64, keepRows int, codec Codec[T]) (*Log[T], error) {
	// Spooled batches hold tool arguments and results: private to the owner.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create spool directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot make the spool directory private: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot read spool directory: %w", err)
	}
	sp := &Log[T]{codec: codec, dir: dir, maxBytes: maxBytes, limitKey: DefaultLimitKey, segmentBytes: min(defaultSegmentBytes, maxBytes), next: 1, nextSeg: 1, keepRows: keepRows}
	var segs []uint64
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, TmpExt):
			// Never acknowledged: the rename that publishes a batch did not happen.
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("cannot remove unfinished spool file: %w", err)
			}
		case strings.HasSuffix(name, Ext):
			seq, err := strconv.ParseUint(strings.TrimSuffix(name, Ext), 10, 64)
			if err != nil {
				continue // not ours
			}
			info, err := e.Info()
			if err != nil {
				return nil, fmt.Errorf("cannot stat spool file: %w", err)
			}
			sp.entries = append(sp.entries, spoolEntry{seq: seq, size: info.Size()})
			sp.bytes += info.Size()
			sp.next = max(sp.next, seq+1)
		case strings.HasSuffix(name, SegExt):
			id, err := strconv.ParseUint(strings.TrimSuffix(name, SegExt), 10, 64)
			if err != nil {
				continue // not ours
			}
			segs = append(segs, id)
			sp.nextSeg = max(sp.nextSeg, id+1)
		case strings.HasSuffix(name, BadExt):
			seq, err := strconv.ParseUint(strings.TrimSuffix(name, BadExt), 10, 64)
			if err == nil {
				sp.next = max(sp.next, seq+1)
			}
		}
	}
	slices.SortFunc(sp.entries, func(a, b spoolEntry) int { return cmp.Compare(a.seq, b.seq) })
	// The files of earlier releases were written before any segment.
	slices.Sort(segs)
	for _, id := range segs {
		if err := sp.recoverSegment(id); err != nil {
			return nil, err
		}
	}
	return sp, nil
}

// Path returns the file of seq with the extension ext.
func (sp *Log[T]) Path(seq uint64, ext string) string {
	return filepath.Join(sp.dir, fmt.Sprintf("%0*d%s", seqWidth, seq, ext))
}

// Where returns the file that holds the batch of seq, for log lines.
func (sp *Log[T]) Where(seq uint64) string {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if i, ok := sp.find(seq); ok && sp.entries[i].seg != nil {
		return fmt.Sprintf("%s (the frame at byte %d)", sp.entries[i].seg.path, sp.entries[i].off)
	}
	return sp.Path(seq, Ext)
}

// find returns the index of seq in entries; the caller holds mu.
func (sp *Log[T]) find(seq uint64) (int, bool) {
	return slices.BinarySearchFunc(sp.entries, seq, func(e spoolEntry, seq uint64) int { return cmp.Compare(e.seq, seq) })
}

// minReadLimit is the least readLimit: the default size of the stores'
// logs.
const minReadLimit = 1 << 30

// readLimit bounds the frames read back: not the spool's maxBytes alone,
// which may have been lowered since they were written (acknowledged
// frames larger than the new limit must still be read, not cut off as a
// torn tail), but at least minReadLimit, past which a frame's length is
// taken for damage.
func (sp *Log[T]) readLimit() int64 { return max(sp.maxBytes, minReadLimit) }

// KeepBytes bounds the batches kept in memory by size as well as by rows:
// at most n of it in all (0: no bound). size must give a batch the same
// figure every time. Call it before the first Append.
func (sp *Log[T]) KeepBytes(n int64, size func(T) int64) {
	sp.keepBytes, sp.keepSize = n, size
}

// keptSize is what a kept batch counts against keepBytes.
func (sp *Log[T]) keptSize(b T) int64 {
	if sp.keepBytes == 0 {
		return 0
	}
	return sp.keepSize(b)
}

// ioError is the error of op on the spool file path: err without path
// again (the *fs.PathError of a write says it), and for a full disk what
// to look at, so that an operator reads the cause once.
func (sp *Log[T]) ioError(op, path string, err error) error {
	if pe, ok := err.(*fs.PathError); ok && pe.Path == path {
		err = pe.Err
	}
	if errors.Is(err, syscall.ENOSPC) {
		return &diskFull{err: fmt.Errorf("cannot %s %s: %w (the disk is full: free space on it; %s bounds the log, not the disk)", op, path, err, sp.limitKey), path: path}
	}
	return fmt.Errorf("cannot %s %s: %w", op, path, err)
}

// diskFull is the error of a write or a sync of the spool file path that
// the disk refused for want of space. It names the file, as the embedded
// store's error does (Writing): the answer to a sender refused for it
// says which file, its base name only; before (op47), the path was cut
// from the *fs.PathError and the answer said "writing its files".
type diskFull struct {
	err  error
	path string
}

func (e *diskFull) Error() string { return e.err.Error() }

func (e *diskFull) Unwrap() error { return e.err }

// Writing names the file the refused write was to: its base name, never
// the path.
func (e *diskFull) Writing() string { return filepath.Base(e.path) }

// DefaultLimitKey is the setting errors name for a spool's limit until
// LimitKey says otherwise: the ClickHouse store's.
const DefaultLimitKey = "spool.max_bytes"

// LimitKey names the setting of the spool's limit in its errors; call it
// before the first append.
func (sp *Log[T]) LimitKey(key string) { sp.limitKey = key }

// Append writes b durably: when it returns nil the batch survives a crash.
func (sp *Log[T]) Append(b T) error {
	data, _, err := EncodeFrame(sp.codec, b, sp.maxBytes)
	if err != nil {
		return fmt.Errorf("%w (%s)", err, sp.limitKey)
	}
	defer putSpoolBuf(data)
	if int64(len(data)) > sp.maxBytes {
		return fmt.Errorf("cannot spool a batch of %d bytes: more than the spool's limit of %d (%s): %w", len(data), sp.maxBytes, sp.limitKey, ErrTooLarge)
	}
	nb := sp.keptSize(b) // KeepBytes is called before the first append
	sp.mu.Lock()
	if sp.bytes+int64(len(data)) > sp.maxBytes {
		sp.mu.Unlock()
		return fmt.Errorf("cannot spool %d bytes (%d of %d used, %s): %w", len(data), sp.bytes, sp.maxBytes, sp.limitKey, ErrFull)
	}
	seg, err := sp.segmentFor(int64(len(data)))
	if err != nil {
		sp.mu.Unlock()
		return err
	}
	off := seg.size
	if _, err := seg.f.WriteAt(data, off); err != nil {
		// What it left after seg.size is a torn tail: no frame goes
		// after it, the next append starts a new segment.
		seg.failed = sp.ioError("write spool segment", seg.path, err)
		sp.mu.Unlock()
		return seg.failed
	}
	seg.size += int64(len(data))
	seg.live++
	seq := sp.next
	sp.next++
	// Kept only when every batch before it still in the spool is: the
	// drain takes the oldest first, so a kept batch behind one read from
	// disk would stay in memory for the whole backlog.
	if n := sp.codec.Rows(b); len(sp.kept) == len(sp.entries) && sp.keptRows+n <= sp.keepRows &&
		(sp.keepBytes == 0 || sp.keptBytes+nb <= sp.keepBytes) {
		if sp.kept == nil {
			sp.kept = map[uint64]T{}
		}
		sp.kept[seq] = b
		sp.keptRows += n
		sp.keptBytes += nb
	}
	if sp.fresh == nil {
		sp.fresh = map[uint64]bool{}
	}
	sp.fresh[seq] = true
	sp.entries = append(sp.entries, spoolEntry{seq: seq, seg: seg, off: off, size: int64(len(data)), pending: true})
	sp.bytes += int64(len(data))
	sp.mu.Unlock()

	err = sp.sync(seg, off+int64(len(data)))
	sp.mu.Lock()
	defer sp.mu.Unlock()
	i, _ := sp.find(seq)
	if err != nil {
		// Not acknowledged. Its frame may still reach the disk; if a
		// crash comes first, recovery finds it and it is drained, as a
		// batch whose sender was told to send it again.
		delete(sp.fresh, seq)
		sp.forget(i)
		return err
	}
	sp.entries[i].pending = false
	return nil
}

// First returns the sequence numbers of the n oldest batches whose appends
// are synced.
func (sp *Log[T]) First(n int) []uint64 {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	seqs := make([]uint64, 0, min(n, len(sp.entries)))
	for _, e := range sp.entries[:min(n, len(sp.entries))] {
		if e.pending {
			break // not acknowledged yet, nor is anything after it
		}
		seqs = append(seqs, e.seq)
	}
	return seqs
}

// View returns the batch of seq to read only: the one kept in memory
// (kept) or the one its file decodes to.
func (sp *Log[T]) View(seq uint64) (b T, kept bool, err error) {
	sp.mu.Lock()
	kb, ok := sp.kept[seq]
	sp.mu.Unlock()
	if ok {
		return kb, true, nil
	}
	b, err = sp.Decode(seq)
	return b, false, err
}

// Decode reads and decodes the frame of seq. A frame that cannot be
// trusted is an error matching ErrCorrupt that names its file, where
// the damage shows and what it is.
func (sp *Log[T]) Decode(seq uint64) (T, error) {
	var zero T
	sp.mu.Lock()
	i, ok := sp.find(seq)
	var e spoolEntry
	if ok {
		e = sp.entries[i]
	}
	sp.mu.Unlock()
	switch {
	case !ok:
		return zero, fmt.Errorf("cannot read spooled batch %d: %w", seq, os.ErrNotExist)
	case e.damage != nil:
		ce := *e.damage
		ce.Path = e.seg.path
		return zero, &ce
	case e.seg == nil:
		return sp.decodeFile(sp.Path(seq, Ext))
	}
	data, err := e.seg.read(e.off, e.size)
	if err != nil {
		return zero, err
	}
	defer putSpoolBuf(data)
	b, err := DecodeFrame(sp.codec, data, sp.readLimit())
	if ce, ok := err.(*CorruptError); ok {
		ce.Path = e.seg.path
		if !ce.InBatch {
			ce.Offset += e.off
		}
	}
	return b, err
}

// decodeFile reads and decodes a spool file of an earlier release, one
// batch in it.
func (sp *Log[T]) decodeFile(path string) (T, error) {
	var zero T
	f, err := os.Open(path)
	if err != nil {
		return zero, fmt.Errorf("cannot read spool file: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return zero, fmt.Errorf("cannot read spool file: %w", err)
	}
	// The writer never made a file larger than the whole spool: one
	// that is (not ours, or the limit lowered since) is not read in.
	if info.Size() > sp.maxBytes {
		return zero, &CorruptError{Path: path, Offset: sp.maxBytes,
			Reason: fmt.Sprintf("the file has %d bytes, more than the spool's limit of %d (%s)", info.Size(), sp.maxBytes, sp.limitKey)}
	}
	data := make([]byte, info.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return zero, fmt.Errorf("cannot read spool file: %w", err)
	}
	b, err := DecodeFrame(sp.codec, data, sp.maxBytes)
	if ce, ok := err.(*CorruptError); ok {
		ce.Path = path
	}
	return b, err
}

// Remove forgets the batch of seq, which the store now has.
func (sp *Log[T]) Remove(seq uint64) error {
	return sp.drop(seq, func(e spoolEntry) error {
		if e.seg != nil {
			return nil // its segment goes once none of its batches is left
		}
		return os.Remove(sp.Path(seq, Ext))
	})
}

// Reject sets the batch of seq aside, as NNNN.rejected, for a person to
// look at: the store refused it for good, or its frame is damaged. From a
// segment, the file holds the frame's bytes as they are there (a frame is
// a spool file of its own).
func (sp *Log[T]) Reject(seq uint64) (string, error) {
	bad := sp.Path(seq, BadExt)
	return bad, sp.drop(seq, func(e spoolEntry) error {
		if e.seg == nil {
			return os.Rename(sp.Path(seq, Ext), bad)
		}
		data, err := e.seg.read(e.off, e.size)
		if err != nil {
			return err
		}
		defer putSpoolBuf(data)
		return writeSynced(sp.dir, bad, data)
	})
}

// SetAside counts the files of the directory set aside for a person:
// rejected batches and cut tails.
func (sp *Log[T]) SetAside() (rejected, torn int, err error) { return setAside(sp.dir, false) }

// SetAsideIn is SetAside for the spool directory dir, open or not; a
// directory that does not exist holds none.
func SetAsideIn(dir string) (rejected, torn int, err error) { return setAside(dir, true) }

func setAside(dir string, missingOK bool) (rejected, torn int, err error) {
	ents, err := os.ReadDir(dir)
	if missingOK && errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	for _, e := range ents {
		switch name := e.Name(); {
		case e.IsDir():
		case strings.HasSuffix(name, BadExt):
			rejected++
		case strings.HasSuffix(name, TornExt):
			torn++
		}
	}
	return rejected, torn, nil
}

// drop forgets the batch of seq after op has dealt with its bytes. The
// drain calls it; once the last batch of a segment is gone, the segment
// goes, and the spare segment of the next append is prepared here, off the
// acknowledgement's path.
func (sp *Log[T]) drop(seq uint64, op func(spoolEntry) error) error {
	sp.mu.Lock()
	i, ok := sp.find(seq)
	if !ok {
		sp.mu.Unlock()
		return nil
	}
	if err := op(sp.entries[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
		sp.mu.Unlock()
		return fmt.Errorf("cannot remove spooled batch: %w", err)
	}
	sp.forget(i)
	needSpare := sp.spare == nil && sp.lastSeg > 0
	sp.mu.Unlock()
	if needSpare {
		// Best effort: without a spare, the next append that needs a
		// segment creates it and reports what fails.
		sp.prepareSpare()
	}
	return nil
}

// forget removes entries[i]; the caller holds mu. A segment left without
// batches is removed.
func (sp *Log[T]) forget(i int) {
	e := sp.entries[i]
	sp.bytes -= e.size
	sp.entries = slices.Delete(sp.entries, i, i+1)
	if kb, ok := sp.kept[e.seq]; ok {
		sp.keptRows -= sp.codec.Rows(kb)
		sp.keptBytes -= sp.keptSize(kb)
		delete(sp.kept, e.seq)
	}
	if e.seg != nil {
		e.seg.live--
		if e.seg.live == 0 {
			// A segment that cannot be removed stays on disk: the
			// next start sends its batches again, which is harmless,
			// and this one is forgotten all the same.
			_ = sp.retire(e.seg)
		}
	}
}

// Usage returns how many batches and bytes the spool holds.
func (sp *Log[T]) Usage() (batches int, bytes int64) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return len(sp.entries), sp.bytes
}

// LastAppended returns the seq of the last batch appended (0 when none),
// its sync done or not.
func (sp *Log[T]) LastAppended() uint64 {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.next - 1
}

// DoneThrough returns the seq up to which every batch has left the spool
// (stored, or moved aside).
func (sp *Log[T]) DoneThrough() uint64 {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if len(sp.entries) == 0 {
		return sp.next - 1
	}
	return sp.entries[0].seq - 1
}

// Tried reports whether an insert may have carried any of seqs already
// (so that the store may hold some of their rows), and marks them tried.
func (sp *Log[T]) Tried(seqs []uint64) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	any := false
	for _, seq := range seqs {
		if !sp.fresh[seq] {
			any = true
		}
		delete(sp.fresh, seq)
	}
	return any
}

// Seqs returns the sequence numbers of every batch in the spool, oldest
// first, synced or not.
func (sp *Log[T]) Seqs() []uint64 {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	seqs := make([]uint64, len(sp.entries))
	for i, e := range sp.entries {
		seqs[i] = e.seq
	}
	return seqs
}
