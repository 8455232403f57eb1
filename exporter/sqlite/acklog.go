package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/spool"
)

// When AppendCalls returns (Options.Ack).
const (
	// AckCommit: once the SQLite transaction holding the calls has
	// committed.
	AckCommit = "commit"
	// AckLog: once the frame holding the calls is synced (fdatasync) to
	// the call log beside the file (LogDir); the committer drains the log
	// into SQLite behind the acknowledgements, in large transactions.
	AckLog = "log"
)

// LogDir returns the directory of the call log of the store file at path
// (Options.Ack "log").
func LogDir(path string) string { return path + ".log" }

// The call log (Ack "log") is a spool (package internal/spool) beside the
// file: AppendCalls encodes its calls' rows as for a commit, appends them
// as one frame, and returns once the frame is synced; appends that arrive
// while a sync is in flight share the next one. The drain (drainLoop)
// submits the frames to the committer oldest first, many in one
// transaction, and removes them once committed; a segment file goes once
// all of its frames are committed. Open replays the frames a stop or a
// crash left before it returns, so that nothing reads the store (the
// detector's engine, a query) without them; a frame applied before the
// crash is applied again, and the calls' unique key (calls_key) stores
// each call once.
//
// The counts AppendCalls returns are the ones a commit would return: a
// call counts as new unless a call of its key (millisecond, tenant, id) is
// stored, is in the log already (pending, counted by key), or comes
// earlier in the same batch. The check runs under callLog.mu, so
// concurrent appends are counted as if they had committed one after
// another. One exception: when a frame's sync fails, a call that a
// concurrent append counted as not new because that frame held it is
// stored by the later frame, uncounted.
//
// Only one process opens the log: the first to lock its directory (serve).
// A command reading the data dir meanwhile (findings --data-dir, verify,
// backup) reads what serve has drained into the file; with serve stopped,
// Verify and Backup apply the log first. At most maxBacklog calls wait
// for the drain.

// logBatch is one frame of the call log: the rows of one AppendCalls.
type logBatch struct {
	calls []callRow
}

// logCodec encodes logBatches for the call log: every field of every row,
// strings and blobs with their length first, integers as varints.
type logCodec struct{}

var _ spool.Codec[*logBatch] = logCodec{}

func (logCodec) Rows(b *logBatch) int { return len(b.calls) }

func (logCodec) Size(b *logBatch) int {
	n := 16
	for i := range b.calls {
		c := &b.calls[i]
		n += 64 + len(c.tenant) + len(c.rec) + 5*len(c.docs)
		if s, ok := c.id.(string); ok {
			n += len(s)
		} else if p, ok := c.id.([]byte); ok {
			n += len(p)
		}
	}
	return n
}

// Ids are the two forms packID returns.
const (
	logIDBlob = 0
	logIDText = 1
)

func (logCodec) Append(dst []byte, b *logBatch) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b.calls)))
	str := func(s []byte) {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	for i := range b.calls {
		c := &b.calls[i]
		switch id := c.id.(type) {
		case []byte:
			dst = append(dst, logIDBlob)
			str(id)
		default:
			dst = append(dst, logIDText)
			dst = binary.AppendUvarint(dst, uint64(len(id.(string))))
			dst = append(dst, id.(string)...)
		}
		dst = binary.AppendUvarint(dst, uint64(len(c.tenant)))
		dst = append(dst, c.tenant...)
		dst = binary.AppendVarint(dst, c.time)
		str(c.rec)
		dst = binary.AppendUvarint(dst, uint64(len(c.docs)))
		for _, d := range c.docs {
			dst = binary.AppendVarint(dst, int64(d))
		}
		if c.ok {
			dst = append(dst, 1)
			dst = binary.AppendVarint(dst, int64(c.session.sh))
			dst = binary.AppendVarint(dst, c.session.minute)
		} else {
			dst = append(dst, 0)
		}
	}
	return dst
}

// Decode decodes a frame's rows; they point into one copy of raw, which
// the spool reuses.
func (logCodec) Decode(raw []byte) (*logBatch, error) {
	data := bytes.Clone(raw)
	off := 0
	var derr error
	fail := func(format string, args ...any) {
		if derr == nil {
			derr = &spool.CorruptError{Offset: int64(off), InBatch: true, Reason: fmt.Sprintf(format, args...)}
		}
		off = len(data)
	}
	uint := func() uint64 {
		v, n := binary.Uvarint(data[off:])
		if n <= 0 {
			fail("a varint cut short or longer than 64 bits")
			return 0
		}
		off += n
		return v
	}
	sint := func() int64 {
		v, n := binary.Varint(data[off:])
		if n <= 0 {
			fail("a varint cut short or longer than 64 bits")
			return 0
		}
		off += n
		return v
	}
	blob := func() []byte {
		n := uint()
		if n > uint64(len(data)-off) {
			fail("a length of %d bytes, %d left", n, len(data)-off)
			return nil
		}
		b := data[off : off+int(n) : off+int(n)]
		off += int(n)
		return b
	}
	byte1 := func() byte {
		if off >= len(data) {
			fail("the batch ends inside a row")
			return 0
		}
		off++
		return data[off-1]
	}
	n := uint()
	// Every row takes at least 6 bytes: a count past that is damage.
	if n > uint64(len(data)-off)/6 {
		fail("%d calls in %d bytes", n, len(data)-off)
	}
	b := &logBatch{calls: make([]callRow, 0, n)}
	for range n {
		if derr != nil {
			break
		}
		var c callRow
		switch byte1() {
		case logIDBlob:
			c.id = blob()
		case logIDText:
			c.id = string(blob())
		default:
			fail("an id of unknown form")
		}
		c.tenant = string(blob())
		c.time = sint()
		c.rec = blob()
		docs := uint()
		if docs > uint64(len(data)-off) {
			fail("%d documents in %d bytes", docs, len(data)-off)
			break
		}
		if docs > 0 {
			c.docs = make([]int32, docs)
			for j := range c.docs {
				c.docs[j] = int32(sint())
			}
		}
		if byte1() == 1 {
			c.ok = true
			c.session.sh = int32(sint())
			c.session.minute = sint()
		}
		b.calls = append(b.calls, c)
	}
	if derr == nil && off != len(data) {
		fail("%d bytes after the last call", len(data)-off)
	}
	if derr != nil {
		return nil, derr
	}
	return b, nil
}

// DecodeLegacy: the call log has no files of earlier releases.
func (logCodec) DecodeLegacy(data []byte) (*logBatch, error) {
	return nil, &spool.CorruptError{Reason: fmt.Sprintf("unknown header %q", data[:min(len(data), len(spool.Magic))])}
}

// callKey is the unique key of a stored call (calls_key): its millisecond,
// tenant and id.
type callKey struct {
	ms     int64
	tenant string
	id     string // idBytes
}

func keyOf(c *callRow) callKey {
	return callKey{ms: milliOf(c.time), tenant: c.tenant, id: string(idBytes(c.id))}
}

// milliOf is callsKey in Go: the nanosecond time t rounded to the nearest
// millisecond, halves away from zero (Go's / and % truncate as SQLite's do).
func milliOf(t int64) int64 {
	ms, rem := t/1_000_000, t%1_000_000
	if rem >= 500_000 {
		ms++
	} else if rem < -500_000 {
		ms--
	}
	return ms
}

// callLog is the store's side of the call log.
type callLog struct {
	l    *spool.Log[*logBatch]
	lock *pebble.Lock

	// mu serializes the check of AppendCalls' counts against each other
	// and against the drain's removal of what it committed.
	mu sync.Mutex
	// pending counts, by key, the calls of the frames appended and not
	// yet committed.
	pending map[hkey]int
	// recent holds the keys of the calls committed since Open past a
	// floor, so that most calls are counted without a read.
	recent recentKeys
	// backlog counts the calls appended and not yet committed.
	backlog int
	// appending counts the appends between their count (pending keys,
	// backlog) and the return of their frame's append (settle), and
	// appendingCalls their calls: counted in backlog, not yet in the log
	// (gather waits for their frames).
	appending      int
	appendingCalls int

	// appendMu is held (read) by the appends in flight, and by Close to
	// wait for them before the last drain; closing is set then.
	appendMu sync.RWMutex
	closing  bool

	kick chan struct{}
	// hurry ends the drain's wait for more frames (gather): a query or
	// an append waits for it.
	hurry chan struct{}
	stop  chan struct{}
	done  chan struct{}

	// progressMu guards progress, closed and replaced whenever the drain
	// removed frames, for the readers waiting for it.
	progressMu sync.Mutex
	progress   chan struct{}
	// failed is the last error of the drain, nil after a success.
	failed error

	// isolate, when not 0, is the last frame of a drain transaction that
	// SQLite refused for good: the drain then commits the frames up to it
	// one at a time, so that the one refused is set aside alone and the
	// others are stored. The drain alone uses it.
	isolate uint64

	// Tests hold gate to stop the drain, and set committed to stop it
	// between a commit and the removal of its frames (a crash there), and
	// refuse to have the commit of some rows fail for good (no real
	// fault does it on demand: rows are checked before they are logged).
	gate      sync.Mutex
	committed func()
	refuse    func([]callRow) error
}

// Bounds of one drain transaction: frames, and calls.
const (
	drainFrames = 256
	drainCalls  = 16384
)

// After a kick the drain waits up to gatherWait for the log to hold
// drainGather calls, so that one sequential sender's frames share a
// transaction (and its COMMIT, fsync and fixed costs) rather than taking
// one each: those costs run on the cores the acknowledgements need. A
// query or an append waiting for the drain ends the wait (hurry).
// Variables for tests.
var (
	gatherWait  = 50 * time.Millisecond
	drainGather = 4096
)

// maxBacklog is how many calls may be acknowledged and not committed: an
// append waits while there are more (up to LogWait, then it is refused),
// so that the acknowledgements do not outrun the committer for long, a
// query waits for two drain transactions at most, and the engine does not
// hold the state of calls the store is far behind on. A variable for
// tests.
var maxBacklog = 2 * drainCalls

// openLog opens the call log in dir (created with Ack "log"), taking its
// lock, and applies what it holds. With Ack "commit" it is closed again
// once applied, and a log that another process holds is left to it.
func (s *Store) openLog(dir string) error {
	if s.opts.Ack != AckLog {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cannot create the call log: %w", err)
	}
	lock, err := pebble.LockDirectory(dir, privateFS{vfs.Default})
	if err != nil {
		if s.opts.Ack == AckLog {
			return fmt.Errorf("cannot lock the call log %s (another process has it?): %w", dir, err)
		}
		// serve holds it and drains it: this process reads what serve
		// has committed.
		s.opts.Logger.Debug("the call log is held by another process; reading what it has committed", "dir", dir)
		return nil
	}
	l, err := spool.Open[*logBatch](dir, s.opts.LogMaxBytes, 8*s.opts.MaxBatch, logCodec{})
	if err != nil {
		lock.Close()
		return fmt.Errorf("cannot open the call log: %w", err)
	}
	l.LimitKey("serve.sqlite.log_max_bytes")
	s.logTailsCut.Store(int64(len(l.Torn())))
	for _, t := range l.Torn() {
		s.opts.Logger.Warn("cut the torn tail off a call log segment: appends whose sync never returned, not acknowledged",
			"file", t.Path, "at_byte", t.At, "bytes", t.Bytes, "kept", t.Kept, "keep_err", t.KeepErr)
	}
	floor, err := storedFloor(s.w)
	if err != nil {
		l.Close()
		lock.Close()
		return fmt.Errorf("cannot open the call log: %w", wrap(err))
	}
	s.clog = &callLog{recent: newRecentKeys(floor), l: l, lock: lock, pending: map[hkey]int{}, kick: make(chan struct{}, 1), hurry: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), progress: make(chan struct{})}
	if n, size := l.Usage(); n > 0 {
		start := time.Now()
		s.opts.Logger.Info("applying the call log to the store before it answers", "frames", n, "bytes", size, "dir", dir)
		for {
			more, err := s.drainOnce()
			if err != nil {
				s.closeLog()
				s.clog = nil
				return fmt.Errorf("cannot apply the call log %s: %w", dir, err)
			}
			if !more {
				break
			}
		}
		s.opts.Logger.Info("applied the call log", "frames", n, "elapsed", time.Since(start))
	}
	if s.opts.Ack != AckLog {
		s.closeLog()
		s.clog = nil // before Open returns: nothing reads it yet
		return nil
	}
	go s.drainLoop()
	return nil
}

// stopLog refuses further appends, waits for those in flight, and drains
// the call log into SQLite before the committer stops; what a failing
// commit leaves is applied by the next Open.
func (s *Store) stopLog() {
	cl := s.clog
	if cl == nil {
		return
	}
	cl.appendMu.Lock()
	cl.closing = true
	cl.appendMu.Unlock()
	close(cl.stop)
	<-cl.done
}

// closeLog releases the call log's files and lock. At Close the store
// keeps clog (its appends refused since stopLog), as AppendCalls reads it
// without a lock.
func (s *Store) closeLog() {
	if s.clog == nil {
		return
	}
	s.clog.l.Close()
	s.clog.lock.Close()
}

// appendLog appends rows to the call log as one frame and returns how
// many of them are new (see callLog) once the frame is synced.
func (s *Store) appendLog(ctx context.Context, rows []callRow, skipped *[]int) (int64, error) {
	cl := s.clog
	cl.appendMu.RLock()
	defer cl.appendMu.RUnlock()
	if cl.closing {
		return 0, audit.ErrClosed
	}
	if err := s.waitBacklog(ctx); err != nil {
		return 0, err
	}
	n, err := s.countNew(ctx, rows, skipped)
	if err != nil {
		cl.mu.Unlock()
		return 0, err
	}
	for i := range rows {
		cl.pending[hashKey(&rows[i])]++
	}
	cl.backlog += len(rows)
	cl.appending++
	cl.appendingCalls += len(rows)
	cl.mu.Unlock()
	err = cl.l.Append(&logBatch{calls: rows})
	if err != nil {
		// Not acknowledged. Its frame was forgotten: the drain never
		// commits it, unless a crash leaves it whole on disk first, and
		// then the restart stores it as if its sender had sent it again.
		s.unpend(rows, false)
	}
	cl.mu.Lock()
	cl.appending--
	cl.appendingCalls -= len(rows)
	cl.mu.Unlock()
	if errors.Is(err, spool.ErrTooLarge) {
		// Larger than the whole log: draining never makes room for it.
		return 0, fmt.Errorf("%w: %w", err, audit.ErrTooLarge)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %w", err, audit.ErrUnavailable)
	}
	select {
	case cl.kick <- struct{}{}:
	default:
	}
	return n, nil
}

// waitBacklog returns holding clog.mu once fewer than maxBacklog calls
// wait for the drain; after LogWait it fails: with audit.ErrOverloaded
// while the drain has not failed (it is behind the load, one transaction
// of 16,384 calls taking seconds on a loaded disk: back-pressure, 429, as
// the ingest queue's with ack commit), with audit.ErrUnavailable when its
// last commit failed (a full disk, an I/O error, a lock held by another
// process past the busy timeout: the store down, 503). Until adv48 both
// were unavailable: a flood of 200 posters had 65,962 calls refused as
// store_unavailable, the reason McpAuditStoreRefusingCalls pages on, while
// the drain committed thousands of calls a second. (Telling a slow drain
// from a stuck one by whether it committed during the wait did not work:
// under that flood one drain transaction took longer than log_wait.)
func (s *Store) waitBacklog(ctx context.Context) error {
	cl := s.clog
	var timeout *time.Timer
	defer stopTimer(&timeout)
	for {
		cl.mu.Lock()
		if cl.backlog < maxBacklog {
			return nil
		}
		// Taken under mu: the drain lowers the backlog under mu, then
		// signals, so this wakeup is not missed.
		ch, failed := cl.nextProgress()
		backlog := cl.backlog
		cl.mu.Unlock()
		cl.hurryDrain()
		if err := s.awaitProgress(ctx, ch, &timeout); errors.Is(err, errLogWait) {
			if failed == nil {
				return fmt.Errorf("%d calls acknowledged from the call log are not committed after %s (serve.sqlite.log_wait): the drain into SQLite is behind the load: %w",
					backlog, s.opts.LogWait, audit.ErrOverloaded)
			}
			return fmt.Errorf("%d calls acknowledged from the call log are not committed after %s (the drain: %v): %w",
				backlog, s.opts.LogWait, failed, audit.ErrUnavailable)
		} else if err != nil {
			return err
		}
	}
}

// hurryDrain ends the drain's wait for more frames, if it waits.
func (cl *callLog) hurryDrain() {
	select {
	case cl.hurry <- struct{}{}:
	default:
	}
}

// errLogWait: LogWait passed (awaitProgress).
var errLogWait = errors.New("log_wait passed")

// nextProgress returns what the drain's next progress will close, and its
// last error.
func (cl *callLog) nextProgress() (<-chan struct{}, error) {
	cl.progressMu.Lock()
	defer cl.progressMu.Unlock()
	return cl.progress, cl.failed
}

// awaitProgress waits for ch (nextProgress), for ctx, or until LogWait has
// passed since the first wait of the caller, which keeps the timer.
func (s *Store) awaitProgress(ctx context.Context, ch <-chan struct{}, timer **time.Timer) error {
	if *timer == nil {
		*timer = time.NewTimer(s.opts.LogWait)
	}
	select {
	case <-ch:
		return nil
	case <-(*timer).C:
		return errLogWait
	case <-ctx.Done():
		return ctx.Err()
	}
}

// settle forgets the pending keys and the backlog once the log is empty
// and no append is between its count and its frame: nothing can be
// pending then. A frame the drain sets aside unread leaves its calls
// counted (they cannot be read back to be forgotten one by one); they go
// here, at the latest when the appends that wait for the backlog have let
// the drain empty the log.
func (s *Store) settle() {
	s.clog.mu.Lock()
	defer s.clog.mu.Unlock()
	s.settleLocked()
}

// settleLocked is settle with clog.mu held.
func (s *Store) settleLocked() {
	cl := s.clog
	if n, _ := cl.l.Usage(); n == 0 && cl.appending == 0 {
		cl.backlog = 0
		clear(cl.pending)
	}
}

// reject sets frame seq aside and forgets its rows (nil when the frame
// could not be read: settleLocked then), both under clog.mu, so that no
// count sees the frame gone from the log and its calls still pending (a
// call sent again then was counted not new, and stored).
func (s *Store) reject(seq uint64, rows []callRow) (string, error) {
	cl := s.clog
	cl.mu.Lock()
	defer cl.mu.Unlock()
	path, err := cl.l.Reject(seq)
	s.logRejected.Add(1)
	if rows != nil {
		s.unpendLocked(rows, false)
	}
	s.settleLocked()
	return path, err
}

// unpend forgets rows from the pending keys: committed (then they are
// stored keys from now on) or never to be.
func (s *Store) unpend(rows []callRow, committed bool) {
	s.clog.mu.Lock()
	defer s.clog.mu.Unlock()
	s.unpendLocked(rows, committed)
}

// unpendLocked is unpend with clog.mu held.
func (s *Store) unpendLocked(rows []callRow, committed bool) {
	cl := s.clog
	cl.backlog = max(0, cl.backlog-len(rows)) // the replay at Open was never counted
	for i := range rows {
		k := hashKey(&rows[i])
		if committed {
			cl.recent.add(milliOf(rows[i].time), k)
		}
		if cl.pending[k] <= 1 {
			delete(cl.pending, k)
		} else {
			cl.pending[k]--
		}
	}
}

// countNew counts the rows a commit would store: neither stored, nor
// pending, nor a copy of an earlier row; the caller holds clog.mu. A key
// past the floor of the recent keys is stored when it is one of them;
// the others are looked up (storedKeys).
func (s *Store) countNew(ctx context.Context, rows []callRow, skipped *[]int) (int64, error) {
	cl := s.clog
	seen := make(map[hkey]bool, len(rows))
	var n int64
	var ask []int
	skip := func(i int) {
		if skipped != nil {
			*skipped = append(*skipped, i)
		}
	}
	for i := range rows {
		k := hashKey(&rows[i])
		if seen[k] || cl.pending[k] > 0 {
			seen[k] = true
			skip(i)
			continue
		}
		seen[k] = true
		switch ms := milliOf(rows[i].time); {
		case ms <= cl.recent.floor:
			ask = append(ask, i)
		case !cl.recent.has(ms, k):
			n++
		default:
			skip(i)
		}
	}
	if len(ask) == 0 {
		return n, nil
	}
	found, err := s.storedKeys(ctx, rows, ask)
	if err != nil {
		return 0, err
	}
	for _, i := range ask {
		if found[keyOf(&rows[i])] {
			skip(i)
		}
	}
	if skipped != nil {
		slices.Sort(*skipped)
	}
	return n + int64(len(ask)-len(found)), nil
}

// hkey is a call's unique key (callKey) hashed to 128 bits, for the maps
// of the call log: a collision (about 2^-64 for a billion keys) would
// count a new call as stored; what is stored is decided by SQLite all the
// same.
type hkey [2]uint64

// The seeds of hkey, per process: the keys are never stored.
var hkeySeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

func hashKey(c *callRow) hkey {
	var buf [96]byte
	b := binary.AppendVarint(buf[:0], milliOf(c.time))
	b = binary.AppendUvarint(b, uint64(len(c.tenant)))
	b = append(b, c.tenant...)
	switch id := c.id.(type) {
	case []byte:
		b = append(append(b, 'b'), id...)
	case string:
		b = append(append(b, 't'), id...)
	}
	return hkey{maphash.Bytes(hkeySeeds[0], b), maphash.Bytes(hkeySeeds[1], b)}
}

// recentKeys holds the keys of the calls stored with a millisecond past
// floor: every one of them, so that a key past floor is stored if and
// only if it is here. At Open floor is the last stored millisecond; keys
// committed since are added, and when there are maxRecent the oldest
// seconds are dropped and floor moves past them.
type recentKeys struct {
	floor int64
	bySec map[int64]map[hkey]struct{}
	n     int
}

// maxRecent bounds the recent keys (about 40 bytes each); tests lower it.
var maxRecent = 1 << 19

func newRecentKeys(floor int64) recentKeys {
	return recentKeys{floor: floor, bySec: map[int64]map[hkey]struct{}{}}
}

func (r *recentKeys) has(ms int64, k hkey) bool {
	_, ok := r.bySec[floorDiv(ms, 1000)][k]
	return ok
}

func (r *recentKeys) add(ms int64, k hkey) {
	if ms <= r.floor {
		return
	}
	sec := floorDiv(ms, 1000)
	m := r.bySec[sec]
	if m == nil {
		m = map[hkey]struct{}{}
		r.bySec[sec] = m
	}
	if _, ok := m[k]; !ok {
		m[k] = struct{}{}
		r.n++
	}
	if r.n > maxRecent {
		r.raise()
	}
}

// raise drops the oldest seconds until half of maxRecent is left.
func (r *recentKeys) raise() {
	secs := make([]int64, 0, len(r.bySec))
	for sec := range r.bySec {
		secs = append(secs, sec)
	}
	slices.Sort(secs)
	for _, sec := range secs {
		if r.n <= maxRecent/2 {
			break
		}
		r.n -= len(r.bySec[sec])
		delete(r.bySec, sec)
		r.floor = max(r.floor, sec*1000+999)
	}
}

// raiseTo moves floor to ms at least, dropping the keys it passes.
func (r *recentKeys) raiseTo(ms int64) {
	if ms <= r.floor {
		return
	}
	r.floor = ms
	// Keys of a second that ms cuts stay, and are not asked for below it.
	for sec, m := range r.bySec {
		if sec*1000+999 <= ms {
			r.n -= len(m)
			delete(r.bySec, sec)
		}
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// storedFloor returns the millisecond of the latest stored call
// (math.MinInt64 when none): no call past it is stored.
func storedFloor(db *sql.DB) (int64, error) {
	var t sql.NullInt64
	if err := db.QueryRow(`SELECT max(time) FROM calls`).Scan(&t); err != nil {
		return 0, err
	}
	if !t.Valid {
		return math.MinInt64, nil
	}
	return milliOf(t.Int64), nil
}

// forgetDeleted keeps the recent keys true after retention deleted calls
// up to the nanosecond time until: the floor moves past them.
func (s *Store) forgetDeleted(until int64) {
	cl := s.clog
	if cl == nil {
		return
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.recent.raiseTo(milliOf(until))
}

// storedKeys counts the rows of rows[ask] whose key is stored
// (readStored).
func (s *Store) storedKeys(ctx context.Context, rows []callRow, ask []int) (map[callKey]bool, error) {
	want := make(map[callKey]any, len(ask)) // the stored id of each key
	packed := make([]any, len(ask))
	for j, i := range ask {
		want[keyOf(&rows[i])] = rows[i].id
		packed[j] = rows[i].id
	}
	found := map[callKey]bool{}
	err := readStored(ctx, s, packed, want, false, func(id any, tenant string, t int64, _ []byte) {
		if k := (callKey{ms: milliOf(t), tenant: tenant, id: string(idBytes(id))}); want[k] != nil {
			found[k] = true
		}
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}

// drainLoop commits the call log's frames behind the acknowledgements
// until Close stops it, and then until the log is empty (or a commit
// fails: what is left is applied by the next Open).
func (s *Store) drainLoop() {
	cl := s.clog
	defer close(cl.done)
	wait := 50 * time.Millisecond
	// openLog applied what the log held: the first round waits for a kick
	// and gathers, as the others do. (A first drain here raced the first
	// appends after Open: when it ran late, it took the first frame alone;
	// flk23.)
	idle := true
	for {
		if idle {
			select {
			case <-cl.kick:
				s.gather()
			case <-cl.stop:
				if n, _ := cl.l.Usage(); n == 0 {
					return
				}
				// Appends that raced Close left frames: one more round.
				if _, err := s.drainOnce(); err != nil {
					return
				}
			}
		}
		more, err := s.drainOnce()
		idle = false
		switch {
		case err != nil:
			select {
			case <-cl.stop:
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
			continue
		case more:
			wait = 50 * time.Millisecond
			continue
		}
		idle = true
	}
}

// gather waits, before the drain takes what the log holds, until it holds
// drainGather calls (or maxBacklog, when lower), until a query or an
// append waits for the drain, Close stops it, or gatherWait has passed.
func (s *Store) gather() {
	cl := s.clog
	timer := time.NewTimer(gatherWait)
	defer timer.Stop()
	for {
		// The calls of appends still writing their frames are not
		// counted: the drain would not find them in the log, and took
		// the frames before them alone (flk23: a drain woken late by a
		// frame's kick saw the next append's calls counted, and
		// committed [20 10] where one sender's 30 calls were gathered).
		cl.mu.Lock()
		enough := cl.backlog-cl.appendingCalls >= min(drainGather, maxBacklog)
		cl.mu.Unlock()
		if enough {
			return
		}
		select {
		case <-cl.kick: // another frame: count again
		case <-cl.hurry:
			return
		case <-cl.stop:
			return
		case <-timer.C:
			return
		}
	}
}

// drainOnce commits the oldest synced frames of the call log in one
// transaction and removes them; more reports whether frames were taken.
// A frame that cannot be decoded, or that SQLite refuses alone for good,
// is set aside (NNNN.rejected) and logged.
func (s *Store) drainOnce() (more bool, err error) {
	cl := s.clog
	cl.gate.Lock()
	defer cl.gate.Unlock()
	limit := drainFrames
	if cl.isolate != 0 {
		limit = 1
	}
	seqs := cl.l.First(limit)
	if len(seqs) == 0 {
		cl.isolate = 0
		return false, nil
	}
	if cl.isolate != 0 && seqs[0] >= cl.isolate {
		cl.isolate = 0 // the frame refused was the last one
	}
	var rows []callRow
	var used []uint64
	for _, seq := range seqs {
		b, _, err := cl.l.View(seq)
		if err != nil {
			path, rerr := s.reject(seq, nil)
			s.opts.Logger.Error("a call log frame cannot be read; set aside", "file", path, "err", err, "move_err", rerr)
			s.signalProgress(nil)
			return true, nil
		}
		if len(used) > 0 && len(rows)+len(b.calls) > drainCalls {
			break
		}
		rows = append(rows, b.calls...)
		used = append(used, seq)
	}
	if cl.refuse != nil {
		err = cl.refuse(rows)
	}
	if err == nil {
		_, err = s.send(context.Background(), &request{calls: rows, watermark: zeroTime}, true)
	}
	if err != nil {
		err = s.fail("apply the call log", err)
		forGood := !errors.Is(err, audit.ErrUnavailable) && !errors.Is(err, audit.ErrClosed)
		if forGood && len(used) == 1 {
			path, rerr := s.reject(used[0], rows)
			s.opts.Logger.Error("the store refused a call log frame; set aside", "file", path, "err", err, "move_err", rerr)
			s.signalProgress(nil)
			return true, nil
		}
		if forGood {
			// One of the frames is refused, and would be with the others
			// at every retry: find it.
			cl.isolate = used[len(used)-1]
			s.opts.Logger.Warn("the store refused a transaction of call log frames; committing them one at a time to set the refused one aside",
				"frames", len(used), "calls", len(rows), "err", err)
			return true, nil
		}
		s.opts.Logger.Warn("cannot apply the call log; retrying", "frames", len(used), "calls", len(rows), "err", err)
		s.signalProgress(err)
		return false, err
	}
	if cl.committed != nil {
		cl.committed()
	}
	for _, seq := range used {
		if err := cl.l.Remove(seq); err != nil {
			// The frame is committed: the next Open applies it again,
			// which stores nothing twice.
			s.opts.Logger.Warn("cannot remove a committed call log frame", "err", err)
		}
	}
	s.unpend(rows, true)
	s.settle()
	s.signalProgress(nil)
	return true, nil
}

// signalProgress wakes the readers waiting for the drain.
func (s *Store) signalProgress(err error) {
	cl := s.clog
	cl.progressMu.Lock()
	cl.failed = err
	close(cl.progress)
	cl.progress = make(chan struct{})
	cl.progressMu.Unlock()
}

// caughtUp returns once every call acknowledged before it was called is
// committed: a query then sees them. It waits LogWait at most (and while
// ctx lasts) and then fails with audit.ErrUnavailable.
func (s *Store) caughtUp(ctx context.Context, op string) error {
	cl := s.clog
	if cl == nil {
		return nil
	}
	s.catchUps.Add(1)
	target := cl.l.LastAppended()
	if cl.l.DoneThrough() < target {
		cl.hurryDrain()
	}
	var timeout *time.Timer
	defer stopTimer(&timeout)
	for {
		ch, failed := cl.nextProgress()
		if cl.l.DoneThrough() >= target {
			return nil
		}
		if err := s.awaitProgress(ctx, ch, &timeout); errors.Is(err, errLogWait) {
			why := "the drain has not failed: it is slow, or waits for the file (a lock held by another process)"
			if failed != nil {
				why = fmt.Sprintf("the drain: %v", failed)
			}
			return fmt.Errorf("cannot %s: calls acknowledged from the call log are not yet committed after %s (%s): %w",
				op, s.opts.LogWait, why, audit.ErrUnavailable)
		} else if err != nil {
			return fmt.Errorf("cannot %s: waiting for the call log to be committed: %w", op, err)
		}
	}
}

func stopTimer(t **time.Timer) {
	if *t != nil {
		(*t).Stop()
	}
}

// LogUsage returns how many frames and bytes the call log holds (zeros
// without one).
func (s *Store) LogUsage() (frames int, bytes int64) {
	if s.clog == nil {
		return 0, 0
	}
	return s.clog.l.Usage()
}

// SpoolUsage returns the bytes of the call log's frames, acknowledged and
// not yet committed, and the log's limit (LogMaxBytes); zeros with Ack
// "commit", which has no log.
func (s *Store) SpoolUsage() (bytes, limit int64) {
	if s.clog == nil {
		return 0, 0
	}
	_, bytes = s.clog.l.Usage()
	return bytes, s.opts.LogMaxBytes
}

// Spooled reports whether the store has a call log: with Ack "log", or
// left by a run with it (applied at Open; its set-aside files stay).
func (s *Store) Spooled() bool {
	if s.clog != nil {
		return true
	}
	_, err := os.Stat(s.logDir)
	return err == nil
}

// SpoolFilesRejected returns how many call log frames were set aside as
// NNNN.rejected since Open: their calls were acknowledged and are not
// stored unless a person acts.
func (s *Store) SpoolFilesRejected() int64 { return s.logRejected.Load() }

// SpoolTailsCut returns how many torn tails Open cut off the call log's
// segments: after a crash, appends whose sync never returned (not
// acknowledged); after a clean stop, the last frame damaged on disk.
func (s *Store) SpoolTailsCut() int64 { return s.logTailsCut.Load() }

// SpoolFilesSetAside returns how many files of the call log's directory
// were set aside for a person (rejected frames, cut tails), from this run
// and earlier ones. No directory is none.
func (s *Store) SpoolFilesSetAside() (rejected, torn int, err error) {
	return spool.SetAsideIn(s.logDir)
}

// Ready fails while the drain of the call log fails: what was
// acknowledged is not committed, and queries wait for it (LogWait) and
// then fail. It fails too while the disk is full: since a write failed
// for want of space (which the error reads as: syscall.ENOSPC), until a
// write as large succeeds or the disk has room again.
func (s *Store) Ready() error {
	if s.closed.Load() {
		return audit.ErrClosed
	}
	cl := s.clog
	if cl == nil {
		return s.fullReason()
	}
	_, failed := cl.nextProgress()
	if failed == nil {
		return s.fullReason()
	}
	frames, bytes := cl.l.Usage()
	return fmt.Errorf("the call log cannot be committed (%d frames, %d bytes acknowledged wait): %w: %w", frames, bytes, audit.ErrUnavailable, failed)
}

// applyLog applies the call log of the store file at path, when it holds
// frames and no other process has it (serve stopped): Verify and Backup
// then see every call acknowledged.
func applyLog(path string) error {
	dir := LogDir(path)
	ents, err := os.ReadDir(dir)
	if err != nil || !hasSegments(ents) {
		return nil
	}
	lock, err := pebble.LockDirectory(dir, privateFS{vfs.Default})
	if err != nil {
		return nil // serve has it
	}
	lock.Close()
	st, err := Open(path, Options{})
	if err != nil {
		return err
	}
	return st.Close()
}

func hasSegments(ents []os.DirEntry) bool {
	for _, e := range ents {
		if n := e.Name(); len(n) > len(spool.SegExt) && n[len(n)-len(spool.SegExt):] == spool.SegExt {
			return true
		}
	}
	return false
}
