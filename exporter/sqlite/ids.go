package sqlite

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

// The call-id index: calls are looked up by id alone (a finding's calls,
// /calls/{id}), but a SQLite index on random ids makes every commit write a
// random page of it. The calls table is kept unique by a near-sequential
// key instead (calls_key: the id's millisecond first), and the lookup by id
// goes through this LSM index beside the file, which appends sequentially.
//
// It is derived: SQLite is the truth, and the index can be rebuilt from
// it at any time. Every entry a lookup finds is checked against the row it
// names, so a stale entry (a deleted call) costs only a read. The index
// holds the calls through a mark rid; calls past it (a failed or lost
// index write) are found by scanning the rows past the mark, so a call can
// be looked up as soon as its append returned whatever the index did.
//
// Keys: idKind, the id's length and bytes (packID), then the tenant's strs
// id (a uvarint), so that a prefix scan by id finds every tenant's copy
// (uvarints are self-delimiting: no id's prefix begins another's); the
// value is the call's rid (a uvarint). Keys beginning
// with 0 are the index's own: its mark and its epoch, a token it shares
// with the SQLite file it was built from.
//
// The same index holds the timeline's document index (schema 5; until then
// the SQLite table call_documents, keyed by the same random hash): a key
// per call and document it touched, docKind, the document's 32-bit hash
// (docHash), the call's time and its rid, all fixed-width and ordered as
// numbers, so that a document's calls read in (time, rid) order; no value.
// It is written, marked, rebuilt and caught up with the ids, and read the
// same way (docBatch): entries through the mark, each checked against its
// row, and the rows past the mark scanned.
//
// And a session index (index format 2): a key per call with a session,
// sessKind, the session's 32-bit hash (sessionHash), the tenant's strs id
// (4 bytes), the call's time and its rid; no value. The tenant comes
// before the time so that a tenant's session page reads its own calls
// only, however many another tenant stores under the same session name; a
// page of every tenant merges the tenants' runs (sessBatch). Until format
// 2 a session's calls were read from every call of the minutes
// session_minutes names, about 16,700 a minute at a million calls an hour.
const (
	idKindBlob byte = 1 // a packed id
	idKindText byte = 2 // an id stored as text
	docKind    byte = 3 // a document hash, time and rid
	sessKind   byte = 4 // a session hash, tenant, time and rid
)

var (
	idsMarkKey    = []byte("\x00mark")
	idsEpochKey   = []byte("\x00epoch")
	idsDeletesKey = []byte("\x00deletes")
	// idsFormatKey holds the index's format (idsFormat, a byte); an index
	// without it, or of an older format, is rebuilt at open.
	idsFormatKey = []byte("\x00format")
)

// idsFormat is the format of the index this version writes: 2 adds the
// session entries. An index of format 1 (no format key: ids and documents)
// lacks them, and is rebuilt at its first open by this version.
const idsFormat = 2

// Meta keys of the file for the index: the epoch of the index built from
// it, and how many transactions deleted calls. The index stores the count
// it applied: an index that applied more deletes than the file holds
// (an older copy of the file restored, its calls deleted from the index
// since) is rebuilt.
//
// The epoch moved to a key of its own with index format 2: releases before
// it read idsEpochLegacy and do not know the format, so that one of them
// opening a file after this version (a downgrade) finds no epoch (or an
// old one) and rebuilds the index without the format key, and this
// version, opened again, rebuilds it with its session entries: otherwise
// the calls the older release stored would have none.
const (
	idsEpochMeta   = "ids_epoch2"
	idsEpochLegacy = "ids_epoch"
	idsDeletesMeta = "ids_deletes"
)

// sqlCountDelete counts a transaction that deletes calls.
const sqlCountDelete = `INSERT INTO meta (key, value) VALUES ('` + idsDeletesMeta + `', 1)
	ON CONFLICT (key) DO UPDATE SET value = value + 1 RETURNING value`

// The id index's block cache and memtable, in bytes. Pebble allocates
// both with its own allocator: in C memory when built with cgo, outside the
// Go heap (IDIndexOffHeapMiB).
const (
	idsCacheBytes    = 8 << 20
	idsMemTableBytes = 4 << 20
	// idsL0Files is how many files flushed to L0 start a compaction.
	idsL0Files = 16
)

// idIndex is the pebble index of call ids. The committer alone writes it;
// lookups read it concurrently.
type idIndex struct {
	// mu orders lookups against close: pebble must not be used closed.
	mu     sync.RWMutex
	closed bool
	db     *pebble.DB
	lock   *pebble.Lock
	cache  interface{ Unref() }
	// mark is the highest rid through which every stored call is indexed.
	mark atomic.Int64
	// behind is set when an index write failed: the committer catches up
	// from SQLite before it moves the mark again.
	behind     bool
	lastRetry  time.Time
	retryEvery time.Duration
	// failures counts the index writes that failed.
	failures atomic.Int64
	// corruptions counts the corrupt blocks pebble met.
	corruptions atomic.Int64
	log         *slog.Logger
	// fault, when set (by tests), fails the index writes it returns an
	// error for.
	fault func() error
	// dead is set once the index is given up (giveUp): nothing reads or
	// writes it until the store is opened again.
	dead atomic.Bool
	// opened is set once pebble's Open returned: its Fatalf then gives
	// the index up instead of panicking.
	opened atomic.Bool
	// gone is closed by giveUp: a use of pebble waited for (guard) then
	// returns at once.
	gone chan struct{}
}

// commit writes b to the index's memtable: the index has no log (see
// openPebble), and a crash loses what was not flushed, which the next
// open catches up from SQLite.
//
// Pebble does not return every failure: it panics when it cannot write a
// file it needs, and a write waits without end while its memtables cannot
// be flushed (a full disk). The write therefore runs in a goroutine of its
// own, which recovers the panic, and is waited for at most writeTimeout:
// either way the index is given up (giveUp) and the store goes on without
// it. After a panic pebble holds its commit lock, and a stalled write
// holds it still, so the index is not used again until the next open.
func (x *idIndex) commit(b *pebble.Batch) error {
	if x.dead.Load() {
		b.Close()
		return errIndexDead
	}
	return x.guard(func() error {
		if x.fault != nil {
			if err := x.fault(); err != nil {
				b.Close()
				return err
			}
		}
		err := b.Commit(pebble.NoSync)
		if err == nil {
			// Back to pebble's pool with its buffer, as pebble's own
			// DB.Set does: a new batch grew its buffer by doubling to a
			// commit's size each time (through serve, 250-400 bytes
			// allocated a call). Only on success: pebble does not reuse
			// a batch that failed.
			b.Close()
		}
		return err
	})
}

// flush writes the index's memtables to its files, for a build's epoch or
// a close to outlast the process: without a log, only flushed entries do.
// A flush waits without end on a full disk (pebble retries it), so it is
// guarded as a write is.
func (x *idIndex) flush() error {
	if x.dead.Load() {
		return errIndexDead
	}
	return x.guard(x.db.Flush)
}

// guard runs f, a use of pebble that may panic or not return, in a
// goroutine of its own, waiting writeTimeout at most; a panic or a stall
// gives the index up.
func (x *idIndex) guard(f func() error) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("%w: %v", errIndexPanic, r)
			}
		}()
		done <- f()
	}()
	timeout := writeTimeout
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		if errors.Is(err, errIndexPanic) {
			x.giveUp(err)
			return errIndexDead
		}
		return err
	case <-x.gone:
		// Given up meanwhile (a flush failed for want of space, or
		// pebble stopped in Fatalf): f may never return.
		return errIndexDead
	case <-t.C:
		x.giveUp(fmt.Errorf("a write has not returned after %s (pebble stalls writes while it cannot flush)", timeout))
		return errIndexDead
	}
}

// writeTimeout bounds a write of the index: a batch is written to pebble's
// log and memtable in microseconds, and waits longer only for a flush (a
// memtable of 4 MiB) that a failing disk never finishes. A variable for
// tests.
var writeTimeout = 30 * time.Second

// Errors of the index's writes.
var (
	// errIndexPanic wraps what pebble panicked with in a write.
	errIndexPanic = errors.New("pebble panicked")
	// errIndexDead is returned by every use of an index given up after a
	// write that panicked or stalled; lookups then scan the calls.
	errIndexDead = errors.New("the call id index was given up after a failed write; it is rebuilt at the next open")
	// errIndexWrite wraps a failure of pebble (not of SQLite) while the
	// index is built or caught up at open.
	errIndexWrite = errors.New("cannot write the call id index")
	// errIndexStalled is returned when opening the index has not
	// returned in time.
	errIndexStalled = errors.New("pebble's open has not returned (it cannot flush its log: a full disk?)")
)

// deadIndex is an index given up at open (it could not be opened or
// built: a full disk): the store opens without it, scanning, and counts
// the failure; the next open builds it.
func deadIndex(lock *pebble.Lock, log *slog.Logger, err error) *idIndex {
	x := &idIndex{lock: lock, log: log, gone: make(chan struct{})}
	x.giveUp(err)
	return x
}

// giveUp stops using the index for the rest of the store's life: pebble
// cannot be trusted (or even closed) after a write that panicked or
// stalled. Lookups by id and by document scan the calls from then on; the
// next Open finds the index behind, or unreadable, and catches it up or
// rebuilds it. It is counted as a failed write.
func (x *idIndex) giveUp(err error) {
	if x.dead.Swap(true) {
		return
	}
	close(x.gone)
	x.failures.Add(1)
	x.log.Error("the call id index cannot be written and is given up until the next start: lookups by call id and document timelines scan the calls (slower); free space under the data dir, then restart",
		"indexed_through", x.mark.Load(), "err", firstLine(err))
}

// idPrefix returns the key prefix of a stored id.
func idPrefix(dst []byte, id any) []byte {
	switch v := id.(type) {
	case []byte:
		dst = append(dst, idKindBlob)
		dst = binary.AppendUvarint(dst, uint64(len(v)))
		return append(dst, v...)
	case string:
		dst = append(dst, idKindText)
		dst = binary.AppendUvarint(dst, uint64(len(v)))
		return append(dst, v...)
	}
	return append(dst, idKindText, 0)
}

// idKey returns the key of a stored id and tenant.
func idKey(dst []byte, id any, tenant int64) []byte {
	return binary.AppendUvarint(idPrefix(dst, id), uint64(tenant))
}

// docKeyLen is the length of a document key: kind, hash, time, rid.
const docKeyLen = 1 + 4 + 8 + 8

// docPrefix returns the prefix of the document keys of hash dh.
func docPrefix(dst []byte, dh int32) []byte {
	return binary.BigEndian.AppendUint32(append(dst, docKind), uint32(dh))
}

// docKey returns the key of a call (time t, rid) on documents of hash dh.
// The time's sign bit is flipped so that negative times sort first; rids
// are not negative.
func docKey(dst []byte, dh int32, t, rid int64) []byte {
	dst = binary.BigEndian.AppendUint64(docPrefix(dst, dh), uint64(t)^1<<63)
	return binary.BigEndian.AppendUint64(dst, uint64(rid))
}

// parseDocKey returns the time and rid of a document key.
func parseDocKey(k []byte) (t, rid int64, ok bool) {
	if len(k) != docKeyLen || k[0] != docKind {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(k[5:13]) ^ 1<<63), int64(binary.BigEndian.Uint64(k[13:])), true
}

// sessKeyLen is the length of a session key: kind, hash, tenant, time,
// rid.
const sessKeyLen = 1 + 4 + 4 + 8 + 8

// sessPrefix returns the prefix of the session keys of hash sh.
func sessPrefix(dst []byte, sh int32) []byte {
	return binary.BigEndian.AppendUint32(append(dst, sessKind), uint32(sh))
}

// sessTenantPrefix returns the prefix of the session keys of hash sh and
// a tenant's strs id. Ids past 32 bits (never given: strs holds the few
// servers, tenants, tools and states) share the last value.
func sessTenantPrefix(dst []byte, sh int32, tenant int64) []byte {
	return binary.BigEndian.AppendUint32(sessPrefix(dst, sh), uint32(min(max(tenant, 0), math.MaxUint32)))
}

// sessKey returns the key of a call (tenant, time t, rid) of a session of
// hash sh, its time ordered as docKey's.
func sessKey(dst []byte, sh int32, tenant, t, rid int64) []byte {
	dst = binary.BigEndian.AppendUint64(sessTenantPrefix(dst, sh, tenant), uint64(t)^1<<63)
	return binary.BigEndian.AppendUint64(dst, uint64(rid))
}

// parseSessKey returns the tenant, time and rid of a session key.
func parseSessKey(k []byte) (tenant, t, rid int64, ok bool) {
	if len(k) != sessKeyLen || k[0] != sessKind {
		return 0, 0, 0, false
	}
	return int64(binary.BigEndian.Uint32(k[5:9])), int64(binary.BigEndian.Uint64(k[9:17]) ^ 1<<63),
		int64(binary.BigEndian.Uint64(k[17:])), true
}

// pebbleLogger routes pebble's messages to slog: errors as errors, the
// rest (compactions, WAL recycling) at debug level.
type pebbleLogger struct {
	log *slog.Logger
	// x is the index logged for: its Fatalf, once open, gives it up.
	x *idIndex
}

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug("id index: " + fmt.Sprintf(format, args...))
}
func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error("id index: " + fmt.Sprintf(format, args...))
}

// Fatalf is what pebble calls when it cannot go on (a MANIFEST it cannot
// create, in a directory it may not write, or write, on a full disk).
// While the index opens it panics with pebbleFatal instead of exiting:
// openPebble turns that into Open's error, which names the directory.
// Once open, Fatalf is called from pebble's own goroutines (a flush or a
// compaction that cannot record its result), where a panic would stop the
// process: the index is given up instead, and the calling goroutine is
// parked for good, holding whatever pebble locks it holds; nothing uses
// that pebble again (giveUp), and the next open judges its files.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error("id index: " + msg)
	if l.x == nil || !l.x.opened.Load() {
		panic(pebbleFatal(msg))
	}
	l.x.giveUp(errors.New(msg))
	select {}
}

// everyFew logs pebble's background errors at most once every few
// seconds, with how many it left out.
type everyFew struct {
	log     *slog.Logger
	every   time.Duration
	mu      sync.Mutex
	last    time.Time
	skipped int
}

func (e *everyFew) backgroundError(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if now := time.Now(); now.Sub(e.last) >= e.every {
		e.log.Error("id index: background error", "err", firstLine(err), "more_since_last", e.skipped)
		e.last, e.skipped = now, 0
		return
	}
	e.skipped++
}

// pebbleFatal is the panic of pebbleLogger.Fatalf.
type pebbleFatal string

// firstLine is err's message without the stack traces pebble's errors
// carry after it.
func firstLine(err error) string {
	if err == nil {
		return ""
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

// privateFS creates pebble's files readable by their owner only, as
// datadir wants every file of a store, whatever the umask.
type privateFS struct{ vfs.FS }

func (fs privateFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return f, private(f, err, name)
}

func (fs privateFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	return f, private(f, err, name)
}

func (fs privateFS) Lock(name string) (io.Closer, error) {
	c, err := fs.FS.Lock(name)
	return c, private(c, err, name)
}

// private makes the file just opened private; on failure it closes it.
func private(f io.Closer, err error, name string) error {
	if err != nil {
		return err
	}
	if err := datadir.Private(name); err != nil {
		f.Close()
		return err
	}
	return nil
}

// openIDs opens the id index in dir, rebuilding it from the calls of db
// when it is missing, unreadable, of another epoch than the file, or ahead
// of the file (an older copy of the file restored beside it), and catching
// it up with the calls past its mark otherwise. db is the writing
// connection; the committer has not started.
//
// When another store holds the index (serve, while a command opens the
// same file to read it), it returns nil: this store then looks calls up by
// id by scanning the table, and indexes nothing; the holder catches up with
// any call this store appends (add).
//
// A rebuild reads and decodes every call for its id and documents (17-52 s
// a million on a busy 2-core host; reading the ids alone took 4-13 s before
// schema 5): it logs its start, its
// progress every progressEvery and its end to log, unless the file holds no
// call, and tells report (if not nil) its progress.
//
// Once ctx is done, a build or a catch-up stops between two batches and
// openIDs returns an error wrapping ctx.Err(): an index whose build did not
// finish has no epoch, so the next open builds it again; a catch-up kept
// its mark, so the next open goes on from it.
func openIDs(ctx context.Context, dir string, db *sql.DB, log *slog.Logger, report func(Progress), wait time.Duration) (*idIndex, error) {
	var epoch []byte
	// A file indexed by a release before format 2 has its epoch under the
	// legacy key: its index is then rebuilt for its format, which is the
	// reason logged.
	err := db.QueryRow(`SELECT value FROM meta WHERE key = ? UNION ALL SELECT value FROM meta WHERE key = ? LIMIT 1`,
		idsEpochMeta, idsEpochLegacy).Scan(&epoch)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	// The highest rid ever given: rids of deleted calls are not reused.
	var seq, deletes int64
	if err := db.QueryRow(`SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'calls'), 0),
		coalesce((SELECT value FROM meta WHERE key = ?), 0)`, idsDeletesMeta).Scan(&seq, &deletes); err != nil {
		return nil, err
	}
	missing := false
	if err := os.Mkdir(dir, datadir.DirMode); err == nil {
		missing = true
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("cannot create the call id index: %w", err)
	}
	if err := datadir.Private(dir); err != nil {
		return nil, err
	}
	lock, err := lockIDs(ctx, dir, wait, log)
	if err != nil && ctx.Err() != nil {
		return nil, err
	}
	if err != nil {
		// A command beside serve (wait 0) meets this every time: not news.
		level := slog.LevelDebug
		if wait > 0 {
			// A collector that runs without its index for its whole life
			// scans for every lookup by id and every document timeline.
			level = slog.LevelWarn
		}
		log.Log(context.Background(), level, "the call id index is held by another process: this store looks calls up by id and builds document timelines by scanning them, until it is opened again",
			"dir", dir, "waited", wait, "err", firstLine(err))
		return nil, nil
	}
	x, reason, err := tryOpenIDs(dir, lock, epoch, seq, deletes, log)
	if err != nil {
		// Still opening in the background: its files cannot be removed
		// for a rebuild under it.
		return deadIndex(lock, log, err), nil
	}
	if x == nil {
		var calls int64
		if err := db.QueryRow(`SELECT count(*) FROM calls`).Scan(&calls); err != nil {
			lock.Close()
			return nil, err
		}
		var p *progress
		switch {
		case !missing:
			log.Warn("rebuilding the call id index: the store answers when done", "dir", dir, "reason", reason, "calls", calls)
		case calls > 0:
			log.Info("building the call id index: the store answers when done", "dir", dir, "reason", "none beside the file", "calls", calls)
		}
		if !missing || calls > 0 {
			p = newProgress(log, "building the call id index", calls).reportTo(report)
		}
		if x, err = rebuildIDs(ctx, dir, lock, db, deletes, p, log); err != nil {
			if ctx.Err() != nil {
				done := int64(0)
				if p != nil {
					done = p.done
				}
				log.Info("building the call id index interrupted: the next open builds it again", "dir", dir, "done", done, "calls", calls)
				lock.Close()
				return nil, err
			}
			if errors.Is(err, errIndexWrite) {
				// Derived: the store opens without it rather than not at
				// all (or, pebble stalling, never).
				return deadIndex(lock, log, err), nil
			}
			lock.Close()
			return nil, err
		}
		if p != nil {
			log.Info("built the call id index", "dir", dir, "calls", p.done, "elapsed", p.elapsed())
		}
	}
	if _, err := x.catchUp(ctx, db, nil); err != nil {
		if errors.Is(err, errIndexWrite) && ctx.Err() == nil {
			x.giveUp(err)
			return x, nil
		}
		x.close()
		return nil, fmt.Errorf("cannot index call ids: %w", err)
	}
	return x, nil
}

// lockIDs takes the index directory's lock, trying again for up to wait
// while another process holds it, or until ctx is done (ctx.Err()).
func lockIDs(ctx context.Context, dir string, wait time.Duration, log *slog.Logger) (*pebble.Lock, error) {
	deadline := time.Now().Add(wait)
	logged := false
	for {
		lock, err := pebble.LockDirectory(dir, privateFS{vfs.Default})
		if err == nil || !time.Now().Before(deadline) {
			return lock, err
		}
		if !logged {
			log.Info("waiting for the call id index, held by another process (a command reading this data dir?)", "dir", dir, "wait", wait)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(250*time.Millisecond, time.Until(deadline))):
		}
	}
}

// tryOpenIDs opens an existing index usable with a file of the given epoch
// highest rid and count of deletes; otherwise it returns nil and why.
// An open that stalled (errIndexStalled) is returned as an error: the
// directory cannot be rebuilt under it.
func tryOpenIDs(dir string, lock *pebble.Lock, epoch []byte, seq, deletes int64, log *slog.Logger) (*idIndex, string, error) {
	if epoch == nil {
		return nil, "the file has no index epoch", nil
	}
	x, err := openPebble(dir, lock, false, log)
	if errors.Is(err, errIndexStalled) {
		return nil, "", err
	}
	if err != nil {
		return nil, err.Error(), nil
	}
	fail := func(reason string) (*idIndex, string, error) {
		x.release() // the lock stays held, for the rebuild
		return nil, reason, nil
	}
	got, err := x.get(idsEpochKey)
	if errors.Is(err, pebble.ErrNotFound) {
		// rebuildIDs writes it last.
		return fail("the index has no epoch: its build did not finish")
	}
	if err != nil || string(got) != string(epoch) {
		return fail("another epoch")
	}
	m, err := x.get(idsMarkKey)
	if err != nil || len(m) != 8 {
		return fail("no mark")
	}
	mark := int64(binary.BigEndian.Uint64(m))
	if mark > seq {
		return fail(fmt.Sprintf("indexed through call %d, beyond the file's last call %d", mark, seq))
	}
	if d, err := x.get(idsDeletesKey); err == nil && len(d) == 8 && int64(binary.BigEndian.Uint64(d)) > deletes {
		return fail(fmt.Sprintf("%d deletes applied, the file has had %d", binary.BigEndian.Uint64(d), deletes))
	}
	if f, err := x.get(idsFormatKey); err != nil || len(f) != 1 || f[0] != idsFormat {
		format := 1
		if err == nil && len(f) == 1 {
			format = int(f[0])
		}
		return fail(fmt.Sprintf("index format %d, this version's is %d (session entries)", format, idsFormat))
	}
	x.mark.Store(mark)
	return x, "", nil
}

// openPebble opens (or creates) the index in dir, whose lock the caller
// holds.
func openPebble(dir string, lock *pebble.Lock, create bool, log *slog.Logger) (x *idIndex, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(pebbleFatal)
			if !ok {
				panic(r)
			}
			x, err = nil, fmt.Errorf("cannot open the call id index %s: %s", dir, firstLine(errors.New(string(f))))
		}
	}()
	cache := pebble.NewCache(idsCacheBytes)
	opts := &pebble.Options{
		Cache:            cache,
		MemTableSize:     idsMemTableBytes,
		ErrorIfNotExists: !create,
		Lock:             lock,
		// The index has no log: pebble writes its memtables to the
		// files alone. It is derived (every entry is checked against
		// its row, the mark says which calls it holds), so a crash
		// losing the memtables costs a catch-up from SQLite at the next
		// open. With a log, a full disk met while pebble switched
		// logs (rotateWAL, when a memtable filled) panicked with
		// pebble's mutex unlocked, and the unlock deferred by its
		// caller stopped the process ("fatal error: sync: unlock of
		// unlocked mutex"), which no recover catches (pebble v2.1.7;
		// op19, serve on a full tmpfs). CockroachDB opens its temporary
		// engines the same way.
		DisableWAL: true,
		Logger:     pebbleLogger{log: log},
		FS:         indexFS(),
		// Call ids are random: every file flushed from a memtable spans
		// the whole key range, so each compaction out of L0 rewrites all
		// of Lbase. Waiting for 16 files instead of pebble's 4 rewrites
		// Lbase a quarter as often (a 20 s run of serve: 8 MB written by
		// compactions instead of 43 MB); a lookup (the API's alone: the
		// commit path does not read the index) checks up to 16 files of
		// L0 instead of 4. Writes stop at 64 files of L0 (by default at
		// 12, three times the threshold).
		L0CompactionThreshold: idsL0Files,
		L0StopWritesThreshold: 4 * idsL0Files,
	}
	x = &idIndex{lock: lock, cache: cache, retryEvery: 5 * time.Second, log: log, gone: make(chan struct{})}
	opts.Logger = pebbleLogger{log: log, x: x}
	// Pebble's default for a corrupt block is Fatalf (the process exits),
	// at every start while the damaged file stays: the index is derived,
	// so a corruption is logged and counted, the read that met it fails
	// (a lookup then scans the calls), and deleting the directory
	// rebuilds it.
	few := &everyFew{log: log, every: 10 * time.Second}
	opts.EventListener = &pebble.EventListener{
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			x.corruptions.Add(1)
			log.Error("the call id index is corrupt: lookups that meet the damage scan the calls; stop serve and delete the directory to rebuild it",
				"dir", dir, "file", info.Path, "err", firstLine(info.Details))
		},
		// A flush that fails (a full disk) is retried at once, again and
		// again: logged each time, it wrote about 100 lines a second.
		//
		// One that fails for want of space gives the index up at once:
		// its memtables would otherwise grow until pebble stalls the
		// next write, which holds the committer writeTimeout.
		BackgroundError: func(err error) {
			few.backgroundError(err)
			if errors.Is(err, syscall.ENOSPC) && x.opened.Load() {
				x.giveUp(fmt.Errorf("pebble cannot write its files: %w", err))
			}
		},
	}
	// Opening replays pebble's log into memtables and may flush them: on a
	// full disk the flush fails again and again and Open waits without
	// end. It is waited for openTimeout at most; a pebble left opening
	// keeps the directory (and the lock), so it is not rebuilt then.
	type opened struct {
		db  *pebble.DB
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				f, ok := r.(pebbleFatal)
				if !ok {
					panic(r)
				}
				ch <- opened{err: errors.New(firstLine(errors.New(string(f))))}
			}
		}()
		db, err := pebble.Open(dir, opts)
		ch <- opened{db, err}
	}()
	t := time.NewTimer(openTimeout)
	defer t.Stop()
	select {
	case o := <-ch:
		if o.err != nil {
			cache.Unref()
			return nil, fmt.Errorf("cannot open the call id index %s: %w", dir, o.err)
		}
		x.db = o.db
		x.opened.Store(true)
		return x, nil
	case <-t.C:
		return nil, fmt.Errorf("cannot open the call id index %s: %w after %s", dir, errIndexStalled, openTimeout)
	}
}

// openTimeout bounds the opening of the index (a variable for tests).
var openTimeout = time.Minute

func (x *idIndex) get(key []byte) ([]byte, error) {
	v, closer, err := x.db.Get(key)
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// close closes the index and releases its lock; a nil index (held by
// another store) has nothing to close.
func (x *idIndex) close() error {
	if x == nil {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.closed = true
	// Unflushed entries would be lost with the memtables (no log): the
	// next open would catch them up from SQLite, the longer the more
	// calls. A flush that fails or stalls (a full disk) gives the index
	// up; the next open catches up from the mark it flushed last.
	if !x.dead.Load() {
		if err := x.flush(); err != nil && !x.dead.Load() {
			x.log.Warn("cannot flush the call id index at close: the next open catches it up from the calls", "err", firstLine(err))
		}
	}
	if x.dead.Load() {
		// Pebble may hold its commit lock for good (a write that
		// panicked or stalls): closing it could wait without end. Its
		// files are left as they are, for the next open to judge.
		return x.lock.Close()
	}
	return errors.Join(x.release(), x.lock.Close())
}

// release closes the index but keeps its lock.
func (x *idIndex) release() error {
	err := x.db.Close()
	x.cache.Unref()
	return err
}

// rebuildIDs empties dir (but for the lock the caller holds) and indexes
// every call of db into a new index of a new epoch, which it then records
// in db; deletes is the file's count of deletes. p hears how many calls
// were indexed. The epoch is written last: an index that ctx broke off
// has none, and the next open rebuilds it.
func rebuildIDs(ctx context.Context, dir string, lock *pebble.Lock, db *sql.DB, deletes int64, p *progress, log *slog.Logger) (*idIndex, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot empty the call id index: %w", err)
	}
	for _, e := range entries {
		if e.Name() == "LOCK" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return nil, fmt.Errorf("cannot empty the call id index: %w", err)
		}
	}
	x, err := openPebble(dir, lock, true, log)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errIndexWrite, err)
	}
	if _, err := x.catchUp(ctx, db, p); err != nil {
		if !x.dead.Load() {
			x.release()
		}
		return nil, fmt.Errorf("cannot index call ids: %w", err)
	}
	epoch := make([]byte, 16)
	rand.Read(epoch)
	epoch = []byte(hex.EncodeToString(epoch))
	b := x.db.NewBatch()
	b.Set(idsDeletesKey, binary.BigEndian.AppendUint64(nil, uint64(deletes)), nil)
	b.Set(idsMarkKey, binary.BigEndian.AppendUint64(nil, uint64(x.mark.Load())), nil)
	b.Set(idsFormatKey, []byte{idsFormat}, nil)
	b.Set(idsEpochKey, epoch, nil)
	// Flushed before SQLite records the epoch: an index without a log
	// holds only what was flushed after a crash, and one whose epoch was
	// lost is built again.
	err = x.commit(b)
	if err == nil {
		err = x.flush()
	}
	if err != nil {
		if !x.dead.Load() {
			x.release()
		}
		return nil, fmt.Errorf("%w: %w", errIndexWrite, err)
	}
	if _, err := db.Exec(`INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
		idsEpochMeta, epoch); err != nil {
		x.release()
		return nil, fmt.Errorf("cannot record the call id index's epoch: %w", err)
	}
	if _, err := db.Exec(`DELETE FROM meta WHERE key = ?`, idsEpochLegacy); err != nil {
		x.release()
		return nil, fmt.Errorf("cannot record the call id index's epoch: %w", err)
	}
	return x, nil
}

// catchUp indexes the calls of q past the mark, in batches, and moves the
// mark to the last. It returns how many calls it indexed; p, when set,
// hears them. Once ctx is done it stops before the next batch, returning
// ctx.Err(); the mark stays at the last batch committed.
func (x *idIndex) catchUp(ctx context.Context, q querier, p *progress) (int64, error) {
	page := idsPage
	var done int64
	for {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		from := x.mark.Load()
		rows, err := q.Query(`SELECT rid, id, tenant, time, rec FROM calls WHERE rid > ? ORDER BY rid LIMIT ?`, from, page)
		if err != nil {
			return done, err
		}
		b := x.db.NewBatch()
		n, last, err := indexRows(rows, b)
		if err != nil {
			b.Close()
			return done, err
		}
		if n == 0 {
			b.Close()
			return done, nil
		}
		b.Set(idsMarkKey, binary.BigEndian.AppendUint64(nil, uint64(last)), nil)
		if err := x.commit(b); err != nil {
			return done, fmt.Errorf("%w: %w", errIndexWrite, err)
		}
		x.mark.Store(last)
		done += int64(n)
		p.step(done)
		if n < page {
			return done, nil
		}
	}
}

// readRange adds to b the calls of q with rids in (from, to).
func (x *idIndex) readRange(q querier, b *pebble.Batch, from, to int64) error {
	rows, err := q.Query(`SELECT rid, id, tenant, time, rec FROM calls WHERE rid > ? AND rid < ?`, from, to)
	if err != nil {
		return err
	}
	_, _, err = indexRows(rows, b)
	return err
}

// idsPage is how many calls a build or a catch-up of the index reads in
// one batch (a variable for tests).
var idsPage = 20000

// querier is a connection or transaction the index reads calls through.
type querier interface {
	Query(string, ...any) (*sql.Rows, error)
}

// indexRows adds to b the calls of rows (rid, id, tenant, time, rec, by
// ascending rid) and closes rows; it returns how many there were and the
// last rid. The documents of a call are read from its record; one that
// does not decode gets no document entries (the timeline could not show
// it either).
func indexRows(rows *sql.Rows, b *pebble.Batch) (n int, last int64, err error) {
	defer rows.Close()
	var key, buf []byte
	for rows.Next() {
		c := indexedCall{}
		var blob []byte
		if err := rows.Scan(&c.rid, &c.id, &c.tenant, &c.time, &blob); err != nil {
			return n, last, err
		}
		c.docs, c.session, c.hasSession, buf = recordKeys(buf, blob)
		key = setEntry(b, key, &c)
		n, last = n+1, c.rid
	}
	return n, last, rows.Err()
}

// recordDocs returns the hashes of the documents in a stored record, and
// the buffer it decompressed into (for reuse); nil when it does not decode.
func recordDocs(buf, blob []byte) ([]int32, []byte) {
	docs, _, _, buf := recordKeys(buf, blob)
	return docs, buf
}

// recordKeys returns what the index keys a stored record by: the hashes
// of its documents and the hash of its session (ok when it has one), and
// the buffer it decompressed into (for reuse). A record that does not
// decode has neither (no page could show it).
func recordKeys(buf, blob []byte) (docs []int32, session int32, ok bool, _ []byte) {
	raw, err := decompress(buf, blob)
	if err != nil {
		return nil, 0, false, buf
	}
	rec := audit.Record{Call: &audit.Call{}}
	if readRecord(raw, &rec) != nil {
		return nil, 0, false, raw
	}
	if rec.Call.Session != "" {
		session, ok = sessionHash(rec.Call.Session), true
	}
	return docHashes(nil, &rec), session, ok, raw
}

// docHashes appends to dst the distinct hashes of r's documents.
func docHashes(dst []int32, r *audit.Record) []int32 {
	for _, d := range r.Documents() {
		if h := docHash(d); !slices.Contains(dst, h) {
			dst = append(dst, h)
		}
	}
	return dst
}

// setEntry adds to b the entries of a call (its id, its documents), built
// in key (returned for reuse).
func setEntry(b *pebble.Batch, key []byte, c *indexedCall) []byte {
	key = idKey(key[:0], c.id, c.tenant)
	var rid [binary.MaxVarintLen64]byte // Set copies it
	b.Set(key, binary.AppendUvarint(rid[:0], uint64(c.rid)), nil)
	for _, dh := range c.docs {
		key = docKey(key[:0], dh, c.time, c.rid)
		b.Set(key, nil, nil)
	}
	if c.hasSession {
		key = sessKey(key[:0], c.session, c.tenant, c.time, c.rid)
		b.Set(key, nil, nil)
	}
	return key
}

// indexedCall is a call a commit stored, for the index: its id, tenant,
// rid, time, the hashes of its documents and of its session (when
// hasSession).
type indexedCall struct {
	id          any
	tenant, rid int64
	time        int64
	docs        []int32
	session     int32
	hasSession  bool
}

// add indexes the calls a commit stored (rids ascending, all past the
// mark) and moves the mark to the last of them; q is the writing
// connection, which catches the index up first when an earlier write
// failed. A failure is logged and counted and leaves the mark behind: the
// calls are found by the scan past the mark, and the next commit (or the
// next open) catches up.
func (x *idIndex) add(q querier, calls []indexedCall) {
	if x == nil || x.dead.Load() {
		return
	}
	if x.behind {
		// At most every few seconds: while the index cannot be written,
		// commits go on without it.
		if time.Since(x.lastRetry) < x.retryEvery {
			return
		}
		x.lastRetry = time.Now()
		if _, err := x.catchUp(context.Background(), q, nil); err != nil {
			x.failed(err)
			return
		}
		x.behind = false
		return // the catch-up read this commit's calls too
	}
	if len(calls) == 0 {
		return
	}
	b := x.db.NewBatch()
	var key []byte
	// Calls another store appended (a command opening the file beside
	// serve) come before this commit's; rids that INSERT OR IGNORE used up
	// leave gaps too, which this finds empty.
	if mark := x.mark.Load(); calls[0].rid > mark+1 {
		if err := x.readRange(q, b, mark, calls[0].rid); err != nil {
			b.Close()
			x.failed(err)
			return
		}
	}
	for i := range calls {
		key = setEntry(b, key, &calls[i])
	}
	last := calls[len(calls)-1].rid
	b.Set(idsMarkKey, binary.BigEndian.AppendUint64(nil, uint64(last)), nil)
	if err := x.commit(b); err != nil {
		x.failed(err)
		return
	}
	x.mark.Store(last)
}

func (x *idIndex) failed(err error) {
	if errors.Is(err, errIndexDead) {
		return // given up, counted and logged once
	}
	x.failures.Add(1)
	x.behind = true
	x.lastRetry = time.Now()
	x.log.Error("cannot write the call id index; lookups by id scan the calls past it until it catches up",
		"indexed_through", x.mark.Load(), "err", firstLine(err))
}

// remove deletes the keys of deleted calls, and records the file's count
// of deletes. A failure costs only space (lookups check every entry), and
// is logged.
func (x *idIndex) remove(calls []indexedCall, deletes int64) {
	if x == nil || x.dead.Load() || len(calls) == 0 {
		return
	}
	b := x.db.NewBatch()
	b.Set(idsDeletesKey, binary.BigEndian.AppendUint64(nil, uint64(deletes)), nil)
	var key []byte
	for _, c := range calls {
		key = idKey(key[:0], c.id, c.tenant)
		b.Delete(key, nil)
		for _, dh := range c.docs {
			key = docKey(key[:0], dh, c.time, c.rid)
			b.Delete(key, nil)
		}
		if c.hasSession {
			key = sessKey(key[:0], c.session, c.tenant, c.time, c.rid)
			b.Delete(key, nil)
		}
	}
	if err := x.commit(b); err != nil {
		x.failures.Add(1)
		x.log.Warn("cannot delete from the call id index; its stale entries are skipped", "err", firstLine(err))
	}
}

// readable says why the index cannot be read, or nil; x.mu is held.
func (x *idIndex) readable() error {
	if x.closed {
		return audit.ErrClosed
	}
	if x.dead.Load() {
		return errIndexDead
	}
	return nil
}

// lookup returns the rids the index holds for the stored ids, and the mark
// it held them through: calls past it must be looked for in SQLite.
func (x *idIndex) lookup(ids []any) (rids []int64, mark int64, err error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if err := x.readable(); err != nil {
		return nil, 0, err
	}
	// The mark first: every call through it is in the index by then.
	mark = x.mark.Load()
	it, err := x.db.NewIter(nil)
	if err != nil {
		return nil, mark, err
	}
	defer it.Close()
	var prefix []byte
	for _, id := range ids {
		prefix = idPrefix(prefix[:0], id)
		for ok := it.SeekGE(prefix); ok; ok = it.Next() {
			k := it.Key()
			if len(k) <= len(prefix) || string(k[:len(prefix)]) != string(prefix) {
				break
			}
			if rid, n := binary.Uvarint(it.Value()); n > 0 {
				rids = append(rids, int64(rid))
			}
		}
		// Each seek resets the iterator's error: check it per id, or a
		// block that failed to read reads as no entry.
		if err := it.Error(); err != nil {
			return nil, mark, err
		}
	}
	return rids, mark, nil
}

// docEntry is a call the document index names: its time and rid.
type docEntry struct{ time, rid int64 }

// docs returns up to n entries of documents of hash dh after the key
// (t, rid) and before until (open when unbounded is set), in (time, rid)
// order, and the mark it read them through: only entries through the mark
// are returned, the rows past it must be looked for in SQLite.
func (x *idIndex) docs(dh int32, t, rid, until int64, unbounded bool, n int) (ents []docEntry, mark int64, err error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if err := x.readable(); err != nil {
		return nil, 0, err
	}
	mark = x.mark.Load()
	// Just after (t, rid): rid -1 stands before every call at t.
	lower := docKey(nil, dh, t, max(rid, 0))
	if rid >= 0 {
		lower = append(lower, 0)
	}
	upper := docKey(nil, dh, until, 0)
	if unbounded {
		// After every key of dh: its prefix, then more 0xff bytes than a
		// key has.
		upper = docPrefix(upper[:0], dh)
		for len(upper) <= docKeyLen {
			upper = append(upper, 0xff)
		}
	}
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, mark, err
	}
	defer it.Close()
	for ok := it.First(); ok && len(ents) < n; ok = it.Next() {
		et, erid, ok := parseDocKey(it.Key())
		if !ok || erid > mark {
			continue // past the mark: the caller scans those rows
		}
		ents = append(ents, docEntry{et, erid})
	}
	return ents, mark, it.Error()
}

// sessions returns up to n entries of sessions of hash sh after the key
// (t, rid) and before until (open when unbounded is set), in (time, rid)
// order, and the mark it read them through, as docs does. With tenant >= 0
// only that tenant's (a strs id) are read; with tenant < 0 every tenant's:
// each tenant's run gives up to n, and the runs are merged.
func (x *idIndex) sessions(sh int32, tenant, t, rid, until int64, unbounded bool, n int) (ents []docEntry, mark int64, err error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if err := x.readable(); err != nil {
		return nil, 0, err
	}
	mark = x.mark.Load()
	it, err := x.db.NewIter(nil)
	if err != nil {
		return nil, mark, err
	}
	defer it.Close()
	// run appends the entries of one tenant in the span.
	var lower, upper []byte
	run := func(tn int64) {
		lower = sessKey(lower[:0], sh, tn, t, max(rid, 0))
		if rid >= 0 {
			lower = append(lower, 0)
		}
		upper = sessKey(upper[:0], sh, tn, until, 0)
		if unbounded {
			upper = sessTenantPrefix(upper[:0], sh, tn)
			for len(upper) <= sessKeyLen {
				upper = append(upper, 0xff)
			}
		}
		got := 0
		for ok := it.SeekGE(lower); ok && got < n; ok = it.Next() {
			k := it.Key()
			if string(k) >= string(upper) {
				break
			}
			_, et, erid, ok := parseSessKey(k)
			if !ok || erid > mark {
				continue // past the mark: the caller scans those rows
			}
			ents = append(ents, docEntry{et, erid})
			got++
		}
	}
	if tenant >= 0 {
		run(tenant)
		return ents, mark, it.Error()
	}
	merged := false
	prefix := sessPrefix(nil, sh)
	for ok := it.SeekGE(prefix); ok; {
		k := it.Key()
		if len(k) < len(prefix)+4 || string(k[:len(prefix)]) != string(prefix) {
			break
		}
		tn := int64(binary.BigEndian.Uint32(k[len(prefix):]))
		if len(ents) > 0 {
			merged = true
		}
		run(tn)
		if err := it.Error(); err != nil {
			return nil, mark, err
		}
		if tn == math.MaxUint32 {
			break
		}
		ok = it.SeekGE(sessTenantPrefix(lower[:0], sh, tn+1))
	}
	if merged {
		slices.SortFunc(ents, func(a, b docEntry) int { return cmp.Or(cmp.Compare(a.time, b.time), cmp.Compare(a.rid, b.rid)) })
		ents = ents[:min(len(ents), n)]
	}
	return ents, mark, it.Error()
}

// callsKey is the expression of calls_key's first column: the millisecond
// a stable id hashes (audit.StableID: time.Round(time.Millisecond), halves
// up), from stored nanoseconds, with floor division written out because
// SQLite's rounds toward zero. The zero time (math.MinInt64) shares the
// key of the earliest storable time (1677). Times are stored whole, so two
// copies of one call have the same key.
const callsKey = `time / 1000000 + (time % 1000000 >= 500000) - (time % 1000000 < -500000)`

// IDIndexFailures returns how many writes of the call id index failed
// since Open. Each is logged; lookups stay complete (they scan the calls
// past the index), only slower, until the index catches up.
func (s *Store) IDIndexFailures() int64 {
	if s.ids == nil {
		return 0
	}
	return s.ids.failures.Load()
}

// IDIndexCorruptions returns how many corrupt blocks of the call id index
// were met since Open. Each is logged; the lookup that met one scans the
// calls instead, and the damage stays until the index is deleted (with
// serve stopped) and rebuilt at the next Open.
func (s *Store) IDIndexCorruptions() int64 {
	if s.ids == nil {
		return 0
	}
	return s.ids.corruptions.Load()
}

// IDIndexDir returns the directory of the id index of the store at path.
// It is derived from the file: a backup need not copy it (it is rebuilt
// when missing), and a file restored without it gets a new one.
func IDIndexDir(path string) string { return path + ".ids" }

// idsFS, when set (by tests), wraps the filesystem the index writes
// through: a disk that fills.
var idsFS func(vfs.FS) vfs.FS

// indexFS is the filesystem of the index's files.
func indexFS() vfs.FS {
	var fs vfs.FS = privateFS{vfs.Default}
	if idsFS != nil {
		fs = idsFS(fs)
	}
	return fs
}
