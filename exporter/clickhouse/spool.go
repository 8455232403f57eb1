package clickhouse

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

var (
	// errSpoolFull is returned by spool.append when the batch would pass
	// the spool's size limit.
	errSpoolFull = errors.New("spool full")
	// errSpoolCorrupt is matched by the error of a spool file that cannot
	// be trusted (a *corruptError): cut short, a checksum that does not
	// match, a length past the spool's limit, an unknown header.
	errSpoolCorrupt = errors.New("corrupt spool file")
)

// spool keeps acknowledged batches on local disk while ClickHouse is
// unreachable: one file per batch, written to a temporary name, synced and
// renamed, so that a file either holds a whole batch or does not exist.
// Files are drained oldest first and removed once ClickHouse has the batch;
// a crash between the insert and the removal only re-sends a batch, which
// its deduplication token (or the stored-row check) makes harmless.
type spool struct {
	dir      string
	maxBytes int64

	mu    sync.Mutex
	files []spoolFile // oldest first
	bytes int64
	next  uint64
	// fresh holds the batches appended by this process that no insert
	// has been tried with: ClickHouse cannot have their rows, so their
	// first insert needs no check for rows already stored.
	fresh map[uint64]bool
	// kept holds the batches appended by this process, as appended, while
	// they and the ones before them hold at most keepRows rows, so that
	// the drain does not read and decode again what it has just encoded
	// (with Ack "log" every acknowledged batch passes through here). The
	// files stay the record; a batch not kept is read from its file.
	kept     map[uint64]*batch
	keptRows int
	keepRows int
}

type spoolFile struct {
	seq  uint64
	size int64
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

const (
	spoolExt      = ".batch"
	spoolTmpExt   = ".tmp"
	spoolBadExt   = ".rejected"
	spoolSeqWidth = 20
)

// openSpool opens (creating) dir, removes unfinished temporary files and
// lists the batches left by an earlier run. Up to keepRows rows of the
// batches appended from now on are also kept in memory for read.
func openSpool(dir string, maxBytes int64, keepRows int) (*spool, error) {
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
	sp := &spool{dir: dir, maxBytes: maxBytes, next: 1, keepRows: keepRows}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, spoolTmpExt):
			// Never acknowledged: the rename that publishes a batch did not happen.
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("cannot remove unfinished spool file: %w", err)
			}
		case strings.HasSuffix(name, spoolExt):
			seq, err := strconv.ParseUint(strings.TrimSuffix(name, spoolExt), 10, 64)
			if err != nil {
				continue // not ours
			}
			info, err := e.Info()
			if err != nil {
				return nil, fmt.Errorf("cannot stat spool file: %w", err)
			}
			sp.files = append(sp.files, spoolFile{seq: seq, size: info.Size()})
			sp.bytes += info.Size()
			sp.next = max(sp.next, seq+1)
		case strings.HasSuffix(name, spoolBadExt):
			seq, err := strconv.ParseUint(strings.TrimSuffix(name, spoolBadExt), 10, 64)
			if err == nil {
				sp.next = max(sp.next, seq+1)
			}
		}
	}
	slices.SortFunc(sp.files, func(a, b spoolFile) int { return cmp.Compare(a.seq, b.seq) })
	return sp, nil
}

func (sp *spool) path(seq uint64, ext string) string {
	return filepath.Join(sp.dir, fmt.Sprintf("%0*d%s", spoolSeqWidth, seq, ext))
}

// append writes b durably: when it returns nil the batch survives a crash.
func (sp *spool) append(b *batch) error {
	data, _, err := encodeFrame(b, sp.maxBytes)
	if err != nil {
		return err
	}
	defer putSpoolBuf(data)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.bytes+int64(len(data)) > sp.maxBytes {
		return fmt.Errorf("cannot spool %d bytes (%d of %d used): %w", len(data), sp.bytes, sp.maxBytes, errSpoolFull)
	}
	seq := sp.next
	tmp, final := sp.path(seq, spoolTmpExt), sp.path(seq, spoolExt)
	if err := writeSynced(tmp, data); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cannot publish spool file: %w", err)
	}
	if err := syncDir(sp.dir); err != nil {
		return err
	}
	sp.next++
	if sp.fresh == nil {
		sp.fresh = map[uint64]bool{}
	}
	sp.fresh[seq] = true
	// Kept only when every batch before it still in the spool is: the
	// drain takes the oldest first, so a kept batch behind one read from
	// disk would stay in memory for the whole backlog.
	if n := b.rows(); len(sp.kept) == len(sp.files) && sp.keptRows+n <= sp.keepRows {
		if sp.kept == nil {
			sp.kept = map[uint64]*batch{}
		}
		sp.kept[seq] = b
		sp.keptRows += n
	}
	sp.files = append(sp.files, spoolFile{seq: seq, size: int64(len(data))})
	sp.bytes += int64(len(data))
	return nil
}

func writeSynced(path string, data []byte) error {
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
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cannot open spool directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("cannot sync spool directory: %w", err)
	}
	return nil
}

// first returns the sequence numbers of the n oldest batches.
func (sp *spool) first(n int) []uint64 {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	seqs := make([]uint64, 0, min(n, len(sp.files)))
	for _, f := range sp.files[:min(n, len(sp.files))] {
		seqs = append(seqs, f.seq)
	}
	return seqs
}

// read returns the batch of seq for an insert, which may change it: a
// batch kept in memory comes back as its file would, a copy of the rows,
// token and acknowledged tables with nothing of an insert tried before it
// was spooled.
func (sp *spool) read(seq uint64) (*batch, error) {
	b, kept, err := sp.view(seq)
	if err != nil {
		return nil, err
	}
	return owned(b, kept), nil
}

// owned returns a batch from view that an insert may change: a batch
// decoded from its file is the caller's already; a kept one is copied, as
// inserts change rows in place (chain nonces, merges) and the kept batch
// must stay as spooled.
func owned(b *batch, kept bool) *batch {
	if !kept {
		return b
	}
	return &batch{
		Calls: slices.Clone(b.Calls), Writes: slices.Clone(b.Writes),
		Findings: slices.Clone(b.Findings), Watermarks: slices.Clone(b.Watermarks),
		Token: b.Token, Done: b.Done, spooled: true,
	}
}

// view returns the batch of seq to read only: the one kept in memory
// (kept) or the one its file decodes to.
func (sp *spool) view(seq uint64) (b *batch, kept bool, err error) {
	sp.mu.Lock()
	kb := sp.kept[seq]
	sp.mu.Unlock()
	if kb != nil {
		return kb, true, nil
	}
	b, err = sp.decode(seq)
	return b, false, err
}

// decode reads and decodes the file of seq. A file that cannot be trusted
// is an error matching errSpoolCorrupt that names it, where the damage
// shows and what it is.
func (sp *spool) decode(seq uint64) (*batch, error) {
	path := sp.path(seq, spoolExt)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read spool file: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot read spool file: %w", err)
	}
	// The writer never makes a file larger than the whole spool: one
	// that is (not ours, or the limit lowered since) is not read in.
	if info.Size() > sp.maxBytes {
		return nil, &corruptError{path: path, offset: sp.maxBytes,
			reason: fmt.Sprintf("the file has %d bytes, more than the spool's limit of %d (spool.max_bytes)", info.Size(), sp.maxBytes)}
	}
	data := make([]byte, info.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("cannot read spool file: %w", err)
	}
	b, err := decodeFrame(data, sp.maxBytes)
	if ce, ok := err.(*corruptError); ok {
		ce.path = path
	}
	return b, err
}

// remove forgets the batch of seq, which ClickHouse now has.
func (sp *spool) remove(seq uint64) error {
	return sp.drop(seq, func(path string) error { return os.Remove(path) })
}

// reject moves the batch of seq aside, for a person to look at: ClickHouse
// refused it for good.
func (sp *spool) reject(seq uint64) (string, error) {
	bad := sp.path(seq, spoolBadExt)
	return bad, sp.drop(seq, func(path string) error { return os.Rename(path, bad) })
}

func (sp *spool) drop(seq uint64, op func(path string) error) error {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	i := slices.IndexFunc(sp.files, func(f spoolFile) bool { return f.seq == seq })
	if i < 0 {
		return nil
	}
	if err := op(sp.path(seq, spoolExt)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cannot remove spool file: %w", err)
	}
	sp.bytes -= sp.files[i].size
	sp.files = slices.Delete(sp.files, i, i+1)
	if kb := sp.kept[seq]; kb != nil {
		sp.keptRows -= kb.rows()
		delete(sp.kept, seq)
	}
	return nil
}

// usage returns how many batches and bytes the spool holds.
func (sp *spool) usage() (batches int, bytes int64) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return len(sp.files), sp.bytes
}

// lastAppended returns the seq of the last batch appended (0 when none).
func (sp *spool) lastAppended() uint64 {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.next - 1
}

// doneThrough returns the seq up to which every batch has left the spool
// (inserted, or moved aside).
func (sp *spool) doneThrough() uint64 {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if len(sp.files) == 0 {
		return sp.next - 1
	}
	return sp.files[0].seq - 1
}

// tried reports whether an insert may have carried any of seqs already
// (so that ClickHouse may hold some of their rows), and marks them tried.
func (sp *spool) tried(seqs []uint64) bool {
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
