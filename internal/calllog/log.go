package calllog

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
	"github.com/mcpaudit/mcpaudit/internal/spool"
)

// Options configure a Log.
type Options struct {
	// Tenant is the tenant whose calls the log holds; Append refuses a
	// call of another (ErrTenant). Default "".
	Tenant string
	// SegmentBytes seals the live segment once it holds this many bytes.
	// Default 64 MiB.
	SegmentBytes int64
	// SegmentAge seals the live segment once it is this old, counted
	// from the creation time its header records (so across opens: a
	// process restarted more often than this still seals), by a timer
	// when it holds a block, so that an idle log seals its last segment
	// too; a recovered segment past it is sealed as soon as the committer
	// starts. A segment of a release before seal52 records no time: when
	// it holds a block it is sealed then too. Default 1h.
	SegmentAge time.Duration
	// MaxGroupCalls bounds the calls of one group commit, one block.
	// Default 8192.
	MaxGroupCalls int
	// Level is zstd's level for blocks. Default zstd.SpeedDefault.
	Level zstd.EncoderLevel
	// TableBytes bounds the memory of the sealed segments' id and
	// document and session tables kept loaded (12 bytes a call and a
	// key): a table is read from its index file when a lookup needs it,
	// and those used least lately are let go past the bound. Default 64
	// MiB (about five segments of 64 MiB).
	TableBytes int64
	// BlockCacheBytes bounds the memory of the blocks decoded last, kept
	// for the next reads (their body decoded and about 100 bytes a call):
	// the block read last always stays, however large. Default 16 MiB.
	BlockCacheBytes int64
	// OnCommit, when set, is called by the committer after each block is
	// synced with the number of calls it holds (benchmarks).
	OnCommit func(calls int)
	// OnBlock, when set, is called by the committer after each block is
	// synced, before the appends it holds return, with the block's place,
	// calls and SHA-256 (the chain of tamper evidence records them). The
	// committer waits for it: it must not call the log.
	OnBlock func(BlockInfo)
	// OnSeal, when set, is called by the committer when a seal fails
	// after the last one succeeded, with its error, and with nil when a
	// seal succeeds after failures: while seals fail (no inode, no room
	// for the index) appends go on into the live segment, past
	// SegmentBytes, its tables in memory, and retention cannot remove it.
	// It must not call the log.
	OnSeal func(error)
	// Files keeps the sealed segments' files open for reads, up to its
	// bound, least recently used closed past it; logs may share one, so
	// that the bound holds across them (calllogs shares one between every
	// tenant's log). Default: a Files of its own of OpenFiles.
	Files *Files
	// OpenFiles bounds the Files the log makes when Files is nil.
	// Default DefaultOpenFiles (256).
	OpenFiles int
	// OnTornTail, when set, is called by Open when it cuts the torn tail
	// of the live segment (a block written whose sync never returned,
	// never acknowledged: a crash mid-write), with the file, the offset
	// it is cut at and the bytes cut. Blocks synced and lost besides
	// (the file shorter than what was acknowledged) cannot be told from
	// it here: the chain of the blocks tells them (exporter/sqlite).
	OnTornTail func(path string, at, cut int64)
	// ReadOnly opens the log to read alone, beside the process that
	// writes it: the open writes, cuts, seals and removes nothing (a
	// segment it would index again is read from its blocks, kept in
	// memory), and reads of the live segment stop before its first block
	// that is not whole and checksummed (a block being written is not
	// read). The reader sees the calls of the blocks synced when it
	// opened the segment, no later one. Append and DeleteBefore return
	// ErrReadOnly. Default false.
	ReadOnly bool
	// Defer opens the log without changing a file: what the open would
	// repair (cut a torn tail, write a torn header again, index a sealed
	// segment again, remove a stale or lone index or a temporary file,
	// create the live segment) is held until Start, which does it and
	// starts the committer; until then the log reads as it will after
	// Start, and Append and DeleteBefore return ErrNotStarted. So a
	// caller that may refuse the log once open (the store, whose chain
	// finds synced blocks lost) leaves the files as it found them.
	// Default false: Open repairs and starts.
	Defer bool
	// Now, when set, is the clock of segment ages (tests). Default
	// time.Now.
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = 64 << 20
	}
	if o.SegmentAge <= 0 {
		o.SegmentAge = time.Hour
	}
	if o.MaxGroupCalls <= 0 {
		o.MaxGroupCalls = 8192
	}
	if o.Level == 0 {
		o.Level = zstd.SpeedDefault
	}
	if o.TableBytes <= 0 {
		o.TableBytes = 64 << 20
	}
	if o.BlockCacheBytes <= 0 {
		o.BlockCacheBytes = 16 << 20
	}
	if o.Files == nil {
		o.Files = NewFiles(o.OpenFiles)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ReadOnly {
		o.Defer = false
	}
}

// Log is one tenant's log of calls in a directory of its own. It is safe
// for concurrent use: appends are group-committed by one committer, and
// reads see every acknowledged call.
type Log struct {
	dir  string
	opts Options
	enc  *encoder
	// group is the committer's room for a group's dedupe, kept from one
	// commit to the next (the committer alone uses it).
	group groupScratch

	mu     sync.RWMutex
	sealed []*segment // by number
	live   *segment   // nil only while closed
	// failed is set when the log can no longer append until it is opened
	// again: a segment that cannot be cut back to its last synced block,
	// or a next segment created for a seal that failed that cannot be
	// removed. A seal that fails alone is tried again at the next commit.
	failed error
	// sealFailing is set while seals fail (OnSeal); the committer alone
	// uses it.
	sealFailing bool

	reqs chan *request
	stop chan struct{}
	done chan struct{}

	// closeMu guards closed and the appends in flight, so that Close
	// waits for them to be answered.
	closeMu  sync.Mutex
	closed   bool
	inflight sync.WaitGroup
	// deferring is set from an Open with Options.Defer until Start, and
	// pending holds the repairs the open left to Start, in order; both
	// are guarded by closeMu once Open has returned.
	deferring bool
	pending   []func() error

	cache  blockCache
	tables tableCache
}

// segment is one segment file with its time index and id table.
type segment struct {
	num  uint64
	path string
	// f is the live segment's file, which the committer writes (and the
	// open recovers); reads go through files (Files.acquire), which holds
	// it as the segment's own while it is live, and a sealed segment's
	// file in its cache.
	f     *os.File
	files *Files
	// own, cached and gone are guarded by files' mu: the segment's own
	// file (the live segment's, or one retention kept open for the
	// segment's holds), the cache's handle of it, and whether the log
	// let it go (the cache keeps its file no longer).
	own, cached *handle
	gone        bool
	// refs counts the log's hold on the segment (one while it is listed)
	// and the readers' (a scan): the files are let go when the last lets
	// go, and retention keeps the file open while holds remain
	// (Files.keep), so a scan goes on reading a segment that retention
	// removed meanwhile.
	refs atomic.Int32
	// The fields below are guarded by the log's mu; the committer alone
	// changes them.
	blocks   []blockRef
	min, max int64 // times of its calls; min > max while it has none
	calls    int
	size     int64
	// created is when the segment was created, as its header records
	// it; zero when unknown (a segment of a release before seal52 holding
	// blocks): its age is then past any bound.
	created time.Time
	// A sealed segment's id table and table of the blocks of each
	// document and session key are in its index file, read when a lookup
	// needs them (Log.tables). The live segment's are these: the block of
	// each id hash, and of the hashes met again (collisions, checked like
	// any match); the blocks of each key. They are nil once it is sealed.
	ids  map[uint64]uint32
	more map[uint64][]uint32
	keys map[uint64][]uint32
}

func newSegmentState(s *segment) {
	s.refs.Store(1)
	s.min, s.max = math.MaxInt64, math.MinInt64
	s.ids, s.more, s.keys = map[uint64]uint32{}, map[uint64][]uint32{}, map[uint64][]uint32{}
}

// hold takes a reader's hold on s; the caller holds the log's mu, under
// which s is listed.
func (s *segment) hold() { s.refs.Add(1) }

// release lets go of a hold on s, and of its files after the last.
func (s *segment) release() error {
	if s.refs.Add(-1) == 0 {
		return s.files.drop(s)
	}
	return nil
}

// candidates returns the blocks of s that may hold an id of hash h; the
// caller holds mu.
func (l *Log) candidates(s *segment, h uint64, out []uint32) ([]uint32, error) {
	if s.ids != nil {
		if b, ok := s.ids[h]; ok {
			out = append(out, b)
			out = append(out, s.more[h]...)
		}
		return out, nil
	}
	t, err := l.tables.get(s)
	if err != nil {
		return out, err
	}
	return t.ids.find(h, out), nil
}

// keyBlocks returns the blocks of s that may hold a call of key hash h;
// the caller holds mu.
func (l *Log) keyBlocks(s *segment, h uint64, out []uint32) ([]uint32, error) {
	if s.keys != nil {
		return append(out, s.keys[h]...), nil
	}
	t, err := l.tables.get(s)
	if err != nil {
		return out, err
	}
	return t.keys.find(h, out), nil
}

// add enters a call of block b, with its id hash h and key hashes, in the
// live tables.
func (s *segment) add(h uint64, keys []uint64, b uint32) {
	if _, ok := s.ids[h]; ok {
		s.more[h] = append(s.more[h], b)
	} else {
		s.ids[h] = b
	}
	for _, k := range keys {
		if bs := s.keys[k]; len(bs) == 0 || bs[len(bs)-1] != b {
			s.keys[k] = append(bs, b)
		}
	}
}

type request struct {
	entries []entry
	hashes  []uint64
	bytes   int // of the encoded records
	held    []int
	err     error
	done    chan struct{}
}

// Open opens the log in dir, creating it when missing. A live segment
// whose last block is torn (a crash between the write and its sync) is cut
// at the last whole, checksummed block: that block was never acknowledged.
// Damage followed by a whole block, or in a sealed segment, is an error
// matching ErrCorrupt: acknowledged calls follow it.
func Open(dir string, opts Options) (*Log, error) {
	opts.defaults()
	if opts.ReadOnly {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("cannot open call log %s: %w", dir, err)
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create call log %s: %w", dir, err)
	}
	l := &Log{dir: dir, opts: opts, enc: newEncoder(opts.Level), deferring: opts.Defer,
		reqs: make(chan *request, 64), stop: make(chan struct{}), done: make(chan struct{})}
	l.cache.init(opts.BlockCacheBytes)
	l.tables.init(opts.TableBytes)
	if err := l.load(); err != nil {
		l.closeFiles()
		return nil, err
	}
	if opts.ReadOnly {
		close(l.done) // no committer
	} else if !l.deferring {
		go l.commit()
	}
	return l, nil
}

// Start makes the repairs an Open with Options.Defer held (a torn tail
// cut, OnTornTail called, the live segment created...) and starts the
// committer: appends are taken from then on. It does nothing on a log
// started already or opened without Defer. When a repair fails it
// returns its error, and a later Start tries again from that repair.
func (l *Log) Start() error {
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if !l.deferring {
		return nil
	}
	for len(l.pending) > 0 {
		if err := l.pending[0](); err != nil {
			return err
		}
		l.pending = l.pending[1:]
	}
	l.deferring = false
	go l.commit()
	return nil
}

// change makes a repair of the open now, or holds it for Start when the
// open is deferred.
func (l *Log) change(fn func() error) error {
	if l.deferring {
		l.pending = append(l.pending, fn)
		return nil
	}
	return fn()
}

// age is how old segment s is.
func (l *Log) age(s *segment) time.Duration {
	if s.created.IsZero() {
		return math.MaxInt64
	}
	return l.opts.Now().Sub(s.created)
}

func (l *Log) segPath(num uint64) string {
	return filepath.Join(l.dir, SegmentName(num))
}

// SegmentName is the file name of segment num in a log's directory.
func SegmentName(num uint64) string { return fmt.Sprintf("%0*d%s", segNameDigits, num, segExt) }

func idxPath(segPath string) string { return segPath[:len(segPath)-len(segExt)] + idxExt }

// Append stores recs durably: when it returns nil, every call it did not
// hold back is in a block synced to disk. A call whose id the log holds
// already, or that an earlier call of the same group commit took, is held
// back: held lists their indexes in recs, in order. On an error none of
// recs is acknowledged (some may be stored, and held when sent again).
func (l *Log) Append(ctx context.Context, recs []audit.Record) (held []int, err error) {
	if l.opts.ReadOnly {
		return nil, fmt.Errorf("cannot append to call log %s: %w", l.dir, ErrReadOnly)
	}
	if len(recs) == 0 {
		return nil, nil
	}
	for i := range recs {
		c := recs[i].Call
		if c.Tenant != l.opts.Tenant {
			return nil, fmt.Errorf("cannot append call %s of tenant %q to the log of %q: %w", c.ID, c.Tenant, l.opts.Tenant, ErrTenant)
		}
		if _, ok := sqlite.TimeNanos(c.Time); !ok {
			return nil, fmt.Errorf("cannot append call %s at %s: %w", c.ID, c.Time, ErrTime)
		}
	}
	req := &request{entries: make([]entry, len(recs)), hashes: make([]uint64, len(recs)), done: make(chan struct{})}
	// Records are encoded by the appenders, in parallel; the committer
	// only compresses and writes.
	scratch := appendScratches.Get().(*appendScratch)
	scratch.encode(recs, req.entries, req.hashes)
	req.bytes = len(scratch.buf)
	if req.bytes > maxAppendBytes {
		return nil, fmt.Errorf("cannot append %d calls of %d bytes encoded: more than a block holds (%d): %w",
			len(recs), req.bytes, maxAppendBytes, ErrTooLarge)
	}
	l.closeMu.Lock()
	if l.closed {
		l.closeMu.Unlock()
		return nil, ErrClosed
	}
	if l.deferring {
		l.closeMu.Unlock()
		return nil, fmt.Errorf("cannot append to call log %s: %w", l.dir, ErrNotStarted)
	}
	l.inflight.Add(1)
	l.closeMu.Unlock()
	defer l.inflight.Done()
	select {
	case l.reqs <- req:
	case <-ctx.Done():
		return nil, fmt.Errorf("cannot append calls: %w", ctx.Err())
	}
	select {
	case <-req.done:
		// The committer is done with the entries (it cleared its own
		// references): their room serves the next append.
		scratch.put()
		return req.held, req.err
	case <-ctx.Done():
		// The committer answers into req, which nobody reads.
		return nil, fmt.Errorf("cannot append calls: %w", ctx.Err())
	}
}

// appendScratch is an append's room for its records encoded and their key
// hashes, which its entries point into. It is reused (appendScratches)
// once the committer has answered the append, never after an append that
// gave up on its context, which the committer may still be reading.
type appendScratch struct {
	buf  []byte
	keys []uint64
}

var appendScratches = sync.Pool{New: func() any { return new(appendScratch) }}

// maxScratchBytes is the most room an appendScratch keeps for the next
// append: a larger one is let go.
const maxScratchBytes = 4 << 20

// encode encodes recs, checked, into es and their id hashes into hashes;
// sc.buf then holds the records encoded.
func (sc *appendScratch) encode(recs []audit.Record, es []entry, hashes []uint64) {
	size := 0
	for i := range recs {
		size += 256 + len(recs[i].Call.Arguments) + len(recs[i].Call.Result)
	}
	// Growing buf or keys mid-way leaves the entries before on the
	// room before, which they keep alive.
	buf := slices.Grow(sc.buf[:0], size)
	keys := slices.Grow(sc.keys[:0], 2*len(recs))
	for i := range recs {
		c := recs[i].Call
		t, _ := sqlite.TimeNanos(c.Time)
		start, kstart := len(buf), len(keys)
		buf = sqlite.AppendRecord(buf, &recs[i])
		keys = appendRecordKeys(keys, &recs[i])
		es[i] = entry{id: c.ID, time: t, rec: buf[start:len(buf):len(buf)], keys: keys[kstart:len(keys):len(keys)]}
		hashes[i] = idHash(c.ID)
	}
	sc.buf, sc.keys = buf, keys
}

// put gives sc back for the next append.
func (sc *appendScratch) put() {
	if cap(sc.buf) > maxScratchBytes || cap(sc.keys)*8 > maxScratchBytes {
		return
	}
	sc.buf, sc.keys = sc.buf[:0], sc.keys[:0]
	appendScratches.Put(sc)
}

// maxGroupBytes stops a group commit from taking more appends once their
// records hold this many bytes, and maxAppendBytes refuses an append whose
// records alone pass what a reader takes of a block (maxBlockRaw, with room
// for the ids and times); a variable for tests.
const maxGroupBytes = 64 << 20

var maxAppendBytes = maxBlockRaw / 2

// commit is the committer: it takes every append waiting, up to
// MaxGroupCalls calls or maxGroupBytes, writes them as one block and syncs it, then answers
// them all.
func (l *Log) commit() {
	defer close(l.done)
	// The age timer runs while the live segment holds a block: it seals
	// the segment once it is SegmentAge old (from its creation), with no commit to
	// check it.
	age := time.NewTimer(time.Hour)
	age.Stop()
	defer age.Stop()
	var ageC <-chan time.Time
	arm := func(d time.Duration) {
		age.Reset(max(d, 0))
		ageC = age.C
	}
	armAge := func() {
		if live := l.live; len(live.blocks) > 0 && l.failed == nil {
			arm(l.opts.SegmentAge - l.age(live))
		} else {
			age.Stop()
			ageC = nil
		}
	}
	armAge()
	var group []*request
	for {
		select {
		case r := <-l.reqs:
			group = append(group[:0], r)
		case <-ageC:
			ageC = nil
			if live := l.live; l.failed == nil && len(live.blocks) > 0 && l.age(live) >= l.opts.SegmentAge {
				if err := l.rotate(); err != nil {
					arm(min(l.opts.SegmentAge, sealRetry))
					continue
				}
			}
			armAge()
			continue
		case <-l.stop:
			return
		}
		n, size := len(group[0].entries), group[0].bytes
	more:
		for n < l.opts.MaxGroupCalls && size < maxGroupBytes {
			select {
			case r := <-l.reqs:
				group = append(group, r)
				n += len(r.entries)
				size += r.bytes
			default:
				break more
			}
		}
		err := l.commitGroup(group)
		for _, r := range group {
			if err != nil {
				r.err, r.held = err, nil
			}
			close(r.done)
		}
		armAge()
	}
}

// sealRetry is how long the age timer waits to try again a seal that
// failed (at most SegmentAge); a commit tries it too.
const sealRetry = time.Second

func (l *Log) commitGroup(group []*request) error {
	if l.failed != nil {
		return l.failed
	}
	// inGroup holds the index in accept of the first call of each id hash
	// taken; calls whose hashes collide (another id) are looked for in
	// hashes, which is rare enough not to need a list per hash.
	accept, hashes, inGroup := l.group.take()
	defer func() { l.group.put(accept, hashes) }()
	var cand []uint32
	l.mu.RLock()
	for _, r := range group {
		for i, e := range r.entries {
			h := r.hashes[i]
			dup := false
			if j, ok := inGroup[h]; ok {
				for ; j < len(accept); j++ {
					if hashes[j] == h && accept[j].id == e.id {
						dup = true
						break
					}
				}
			}
			if !dup {
				var err error
				if dup, err = l.storedLocked(h, e.id, e.time, &cand); err != nil {
					l.mu.RUnlock()
					return err
				}
			}
			if dup {
				r.held = append(r.held, i)
				continue
			}
			if _, ok := inGroup[h]; !ok {
				inGroup[h] = len(accept)
			}
			accept = append(accept, e)
			hashes = append(hashes, h)
		}
	}
	l.mu.RUnlock()
	if len(accept) == 0 {
		return nil
	}
	// accept is in time order already when the group is one request whose
	// calls came sorted (receivers sort each source's calls): most often.
	sorted := accept
	if !slices.IsSortedFunc(accept, func(a, b entry) int { return cmpInt(a.time, b.time) }) {
		order := make([]int, len(accept))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int {
			return cmpInt(accept[a].time, accept[b].time)
		})
		sorted = make([]entry, len(accept))
		for i, j := range order {
			sorted[i] = accept[j]
		}
	}
	data, mn, mx := l.enc.encode(sorted)
	live := l.live
	if _, err := live.f.WriteAt(data, live.size); err != nil {
		return l.writeFailed(fmt.Errorf("cannot write call log %s: %w", live.path, err))
	}
	if err := spool.Fdatasync(live.f); err != nil {
		return l.writeFailed(fmt.Errorf("cannot sync call log %s: %w", live.path, err))
	}
	l.mu.Lock()
	bn := uint32(len(live.blocks))
	live.blocks = append(live.blocks, blockRef{off: live.size, size: uint32(len(data)), count: uint32(len(accept)), min: mn, max: mx})
	live.size += int64(len(data))
	live.calls += len(accept)
	live.min, live.max = minInt(live.min, mn), maxInt(live.max, mx)
	for i, h := range hashes {
		live.add(h, accept[i].keys, bn)
	}
	l.mu.Unlock()
	if l.opts.OnCommit != nil {
		l.opts.OnCommit(len(accept))
	}
	if l.opts.OnBlock != nil {
		r := live.blocks[bn]
		l.opts.OnBlock(blockInfo(live.num, bn, r, sha256.Sum256(data)))
	}
	if live.size >= l.opts.SegmentBytes || l.age(live) >= l.opts.SegmentAge {
		// The block is synced: this group is acknowledged whatever the
		// seal does. A seal that fails leaves the live segment live and
		// whole: the next groups go on into it and try the seal again.
		l.rotate()
	}
	return nil
}

// groupScratch is the committer's room for the calls a group commit
// accepts, their id hashes and the first index of each hash.
type groupScratch struct {
	accept  []entry
	hashes  []uint64
	inGroup map[uint64]int
}

func (g *groupScratch) take() ([]entry, []uint64, map[uint64]int) {
	if g.inGroup == nil {
		g.inGroup = map[uint64]int{}
	}
	return g.accept[:0], g.hashes[:0], g.inGroup
}

// put keeps the room of accept and hashes for the next group, emptied:
// what the entries point to (the appenders' records) is let go.
func (g *groupScratch) put(accept []entry, hashes []uint64) {
	clear(accept)
	clear(g.inGroup)
	// A group far larger than the usual keeps no room past 64k calls.
	if cap(accept) > 1<<16 {
		accept, hashes, g.inGroup = nil, nil, nil
	}
	g.accept, g.hashes = accept[:0], hashes[:0]
}

// writeFailed cuts the live segment back to its last synced block and
// seals it, so that nothing is appended after bytes that may be torn; the
// next group goes to a new segment.
func (l *Log) writeFailed(err error) error {
	live := l.live
	// The cut is synced before the seal, which creates the next segment
	// first: a crash then finds this segment, no longer the last, whole,
	// not with a torn tail a sealed segment is refused for.
	terr := live.f.Truncate(live.size)
	if terr == nil {
		terr = spool.Fdatasync(live.f)
	}
	if terr != nil {
		l.failed = fmt.Errorf("%w (and cannot cut it back: %v)", err, terr)
		return err
	}
	// When the seal fails too, the live segment, cut back, takes the
	// next group at its last synced block, and the seal is tried again.
	l.rotate()
	return err
}

// storedLocked tells whether the log holds id (of hash h, at time t); the
// caller holds mu. A duplicate can only be in the live segment or in a
// sealed one whose time range meets t's millisecond (idWindow): the same
// call sent with its time in milliseconds, or in nanoseconds, has one id.
func (l *Log) storedLocked(h uint64, id string, t int64, cand *[]uint32) (bool, error) {
	check := func(s *segment) (bool, error) {
		var err error
		if *cand, err = l.candidates(s, h, (*cand)[:0]); err != nil {
			return false, err
		}
		for _, bn := range *cand {
			b, err := l.readBlock(s, bn)
			if err != nil {
				return false, err
			}
			for i := range b.entries {
				if b.entries[i].id == id {
					return true, nil
				}
			}
		}
		return false, nil
	}
	if ok, err := check(l.live); ok || err != nil {
		return ok, err
	}
	lo, hi := idWindow(t)
	for _, s := range l.sealed {
		if s.min <= hi && lo <= s.max {
			if ok, err := check(s); ok || err != nil {
				return ok, err
			}
		}
	}
	return false, nil
}

// rotate seals the live segment (when it holds a block; else removes it)
// and starts the next. The next segment is created first: on an error the
// live segment stays live and whole, and the seal is tried again later.
// Where what a failed seal left cannot be undone, rotate sets failed.
// OnSeal hears of the first failure and of the recovery.
func (l *Log) rotate() error {
	err := l.rotateOnce()
	if (err != nil) != l.sealFailing {
		l.sealFailing = err != nil
		if l.opts.OnSeal != nil {
			l.opts.OnSeal(err)
		}
	}
	return err
}

func (l *Log) rotateOnce() error {
	live := l.live
	s, err := l.createSegment(live.num + 1)
	if err != nil {
		return err
	}
	if len(live.blocks) > 0 {
		if err := l.seal(live); err != nil {
			// The next segment goes, durably, so that the live one stays
			// the last: a crash recovers it as live, its torn tail cut,
			// not as a sealed segment refused for that tail.
			s.f.Close()
			rerr := os.Remove(s.path)
			if rerr == nil {
				rerr = syncDir(l.dir)
			}
			if rerr != nil {
				l.failed = fmt.Errorf("%w (and cannot remove the next segment %s: %v)", err, s.path, rerr)
			}
			return err
		}
	}
	l.mu.Lock()
	if len(live.blocks) > 0 {
		l.sealed = append(l.sealed, live)
	}
	l.live = s
	l.mu.Unlock()
	if len(live.blocks) > 0 {
		// Sealed: its file goes to the cache of open files, within
		// its bound, like every sealed segment's.
		l.opts.Files.disown(live)
	} else {
		live.release()
		os.Remove(live.path)
	}
	return nil
}

// seal writes the index of s and turns its id and key tables into the
// sorted ones.
func (l *Log) seal(s *segment) error {
	l.mu.RLock()
	n := len(s.ids)
	for _, m := range s.more {
		n += len(m)
	}
	type pair struct {
		h uint64
		b uint32
	}
	ps := make([]pair, 0, n)
	for h, b := range s.ids {
		ps = append(ps, pair{h, b})
		for _, b2 := range s.more[h] {
			ps = append(ps, pair{h, b2})
		}
	}
	var ks []pair
	for k, bs := range s.keys {
		for _, b := range bs {
			ks = append(ks, pair{k, b})
		}
	}
	blocks := slices.Clone(s.blocks)
	l.mu.RUnlock()
	sorted := func(ps []pair) table {
		slices.SortFunc(ps, func(a, b pair) int {
			if c := cmpUint(a.h, b.h); c != 0 {
				return c
			}
			return cmpUint(uint64(a.b), uint64(b.b))
		})
		t := table{make([]uint64, len(ps)), make([]uint32, len(ps))}
		for i, p := range ps {
			t.hashes[i], t.blockOf[i] = p.h, p.b
		}
		return t
	}
	ids, keys := sorted(ps), sorted(ks)
	if err := datadir.WriteFileSynced(idxPath(s.path), encodeIndex(blocks, ids, keys), datadir.FileMode); err != nil {
		// An index left by a failed seal (its directory not synced after
		// the rename) would make the segment, still live, sealed at the
		// next open without the blocks appended since.
		if rerr := os.Remove(idxPath(s.path)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			l.failed = fmt.Errorf("%w (and cannot remove the index: %v)", err, rerr)
		}
		return err
	}
	l.mu.Lock()
	// Its tables are kept loaded while the bound allows: late calls and
	// queries fall mostly into the segments sealed last.
	l.tables.put(s.num, &sealedTables{ids: ids, keys: keys})
	s.ids, s.more, s.keys = nil, nil, nil
	l.mu.Unlock()
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// createSegment creates segment num with its header, synced with its
// directory entry before any block goes in: a block's fdatasync then
// suffices.
func (l *Log) createSegment(num uint64) (*segment, error) {
	path := l.segPath(num)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot create call log segment: %w", err)
	}
	created := l.opts.Now()
	if _, err := f.Write(segHeader(created)); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("cannot create call log segment %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("cannot create call log segment %s: %w", path, err)
	}
	if err := syncDir(l.dir); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("cannot create call log segment %s: %w", path, err)
	}
	s := &segment{num: num, path: path, f: f, files: l.opts.Files, size: segHeadLen, created: created}
	newSegmentState(s)
	l.opts.Files.own(s, f)
	return s, nil
}

// DeleteBefore removes every sealed segment whose calls are all before t,
// and returns how many calls went. The live segment is never removed:
// retention is by whole segments, so calls before t may stay until their
// segment is sealed and wholly before t.
func (l *Log) DeleteBefore(t time.Time) (int64, error) {
	if l.opts.ReadOnly {
		return 0, fmt.Errorf("cannot delete from call log %s: %w", l.dir, ErrReadOnly)
	}
	l.closeMu.Lock()
	deferring := l.deferring
	l.closeMu.Unlock()
	if deferring {
		return 0, fmt.Errorf("cannot delete from call log %s: %w", l.dir, ErrNotStarted)
	}
	n, ok := sqlite.TimeNanos(t)
	if !ok {
		return 0, fmt.Errorf("cannot delete calls before %s: %w", t, ErrTime)
	}
	l.mu.Lock()
	var gone []*segment
	keep := l.sealed[:0:0]
	for _, s := range l.sealed {
		if s.max < n {
			gone = append(gone, s)
		} else {
			keep = append(keep, s)
		}
	}
	l.sealed = keep
	l.mu.Unlock()
	var calls int64
	var errs []error
	for _, s := range gone {
		calls += int64(s.calls)
		if s.refs.Load() > 1 {
			// Scans or a snapshot hold it: its file stays open for
			// them, past the cache's bound, until the last lets go
			// (no hold can be taken any more: it is not listed).
			if err := s.files.keep(s); err != nil {
				errs = append(errs, err)
			}
		}
		// The segment first: an index without its segment is removed
		// at open, a segment without its index is indexed again.
		if err := os.Remove(s.path); err != nil {
			errs = append(errs, err)
		}
		if err := os.Remove(idxPath(s.path)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		l.cache.drop(s.num)
		l.tables.drop(s.num)
		// Its file stays open until the scans reading it end (keep).
		s.release()
	}
	if len(gone) > 0 {
		if err := syncDir(l.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return calls, fmt.Errorf("cannot remove call log segments: %w", err)
	}
	return calls, nil
}

// Stats describes the log.
type Stats struct {
	Segments int   // files of calls, the live one included
	Calls    int64 // calls stored
	Blocks   int64
	// Bytes is the size of the segments and their indexes.
	Bytes int64
	// TableLoads counts the sealed segments' tables read from their index
	// files since the open (a lookup that needs a table not kept loaded).
	TableLoads int64
}

// Newest returns the time of the latest call the log holds (zero when it
// holds none, or only calls of zero time), from its segments' time index:
// no block is read. A read-only log answers for the blocks it has read.
func (l *Log) Newest() (time.Time, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.live == nil {
		return time.Time{}, ErrClosed
	}
	newest := int64(math.MinInt64)
	for _, s := range l.sealed {
		if s.calls > 0 {
			newest = max(newest, s.max)
		}
	}
	if l.live.calls > 0 {
		newest = max(newest, l.live.max)
	}
	if newest == math.MinInt64 {
		return time.Time{}, nil
	}
	return sqlite.NanosTime(newest), nil
}

// Stats returns the log's counts and size.
func (l *Log) Stats() (Stats, error) {
	l.mu.RLock()
	segs := append(slices.Clone(l.sealed), l.live)
	var st Stats
	for _, s := range segs {
		if s == nil {
			continue
		}
		st.Segments++
		st.Calls += int64(s.calls)
		st.Blocks += int64(len(s.blocks))
	}
	l.mu.RUnlock()
	l.tables.mu.Lock()
	st.TableLoads = l.tables.loads
	l.tables.mu.Unlock()
	for _, s := range segs {
		if s == nil {
			continue
		}
		for _, p := range []string{s.path, idxPath(s.path)} {
			if fi, err := os.Stat(p); err == nil {
				st.Bytes += fi.Size()
			} else if !errors.Is(err, os.ErrNotExist) {
				return st, fmt.Errorf("cannot size call log: %w", err)
			}
		}
	}
	return st, nil
}

// Close waits for the appends in flight to be answered and releases the
// files. The live segment stays unsealed: Open appends to it again.
func (l *Log) Close() error {
	l.closeMu.Lock()
	if l.closed {
		l.closeMu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.closeMu.Unlock()
	l.inflight.Wait()
	close(l.stop)
	if l.deferring {
		close(l.done) // never started: no committer
	}
	<-l.done
	return l.closeFiles()
}

func (l *Log) closeFiles() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, s := range append(slices.Clone(l.sealed), l.live) {
		if s != nil {
			errs = append(errs, s.release())
		}
	}
	// Reads after Close see no segment and say ErrClosed.
	l.sealed, l.live = nil, nil
	return errors.Join(errs...)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
