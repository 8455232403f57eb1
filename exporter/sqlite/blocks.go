package sqlite

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpaudit/mcpaudit/exporter/chain"
)

// Calls in the call log (Calls "log") are chained by their blocks: each
// block a tenant's log syncs is recorded in chain_blocks (its place, calls,
// time span and SHA-256 as synced) and covered by a blocks entry of the
// tenant's chain, which digests the records it covers. The blocks synced
// while one transaction runs are chained together by the next, one entry
// per tenant: the commit of calls never waits for SQLite (the log acks a
// block once synced), and a crash between the sync and the chain's commit
// is made good at the next open (recoverBlocks). Retention's cuts of the
// logs are chained (logcut entries) before any segment goes, so that verify
// tells a segment retention removed from one deleted; once they went, the
// records of their blocks go too, and the chain's cut passes the entries
// they emptied and the logcut entries a later one supersedes
// (pruneBlocks, cutChains).
const (
	chainBlocksTable = `CREATE TABLE IF NOT EXISTS chain_blocks (
		tenant TEXT    NOT NULL,
		seg    INTEGER NOT NULL,
		block  INTEGER NOT NULL,
		calls  INTEGER NOT NULL,
		first  INTEGER NOT NULL, -- the earliest call time, unix ns
		last   INTEGER NOT NULL, -- the latest
		hash   BLOB    NOT NULL, -- SHA-256 of the block's bytes as synced
		entry  INTEGER NOT NULL, -- the blocks entry that covers it
		PRIMARY KEY (tenant, seg, block)
	) WITHOUT ROWID, STRICT`
	sqlInsertBlock = `INSERT OR IGNORE INTO chain_blocks (tenant, seg, block, calls, first, last, hash, entry)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
)

// LogBlock is one block of a tenant's call log as the chain records it.
type LogBlock struct {
	Tenant  string
	Segment uint64 // the segment's number, which orders the segments
	Block   int    // the block's rank in its segment, from 0
	Calls   int
	// First and Last are the earliest and latest call times it holds,
	// in unix nanoseconds.
	First, Last int64
	SHA256      [sha256.Size]byte
}

// after reports whether b comes after segment seg's block blk.
func (b *LogBlock) after(seg uint64, blk int) bool {
	return b.Segment > seg || b.Segment == seg && b.Block > blk
}

// blockHash is the hash of a chain_blocks record.
func blockHash(b *LogBlock) chain.Hash {
	return chain.RowHash([]byte("block"), []byte(b.Tenant), chain.Int(int64(b.Segment)), chain.Int(int64(b.Block)),
		chain.Int(int64(b.Calls)), chain.Int(b.First), chain.Int(b.Last), b.SHA256[:])
}

// blocksDigest is the digest of a blocks entry: its records in log order.
func blocksDigest(bs []LogBlock) chain.Hash {
	slices.SortFunc(bs, cmpBlocks)
	hs := make([]chain.Hash, len(bs))
	for i := range bs {
		hs[i] = blockHash(&bs[i])
	}
	return chain.Digest(hs)
}

func cmpBlocks(a, b LogBlock) int {
	return cmp.Or(cmp.Compare(a.Segment, b.Segment), cmp.Compare(a.Block, b.Block))
}

// logCutDigest is the digest of a logcut entry: the cut, unix ns.
func logCutDigest(cut int64) chain.Hash { return chain.RowHash([]byte("logcut"), chain.Int(cut)) }

// BlockLog is a CallLog whose blocks the chain records: the store chains
// each block it syncs, and verify compares the blocks on disk with the
// chain. Every method is safe for concurrent use.
type BlockLog interface {
	CallLog
	// ChainBlocks has fn called with each block synced from now on,
	// before the appends it holds return, by the goroutine that synced
	// it (blocks of one tenant in order); fn must not call the log. It
	// reports false, and does nothing, for a log opened to read alone.
	ChainBlocks(fn func(LogBlock)) bool
	// Tenants returns the tenants that have a log.
	Tenants() []string
	// DeleteTenantsBefore is DeleteBefore of the logs of tenants alone:
	// the store passes the tenants whose cut it has chained, so that a
	// log created since it listed them is not cut without a chained cut.
	DeleteTenantsBefore(t time.Time, tenants []string) (int64, error)
	// Segments returns the numbers of the segments tenant's log holds on
	// disk, in order.
	Segments(tenant string) ([]uint64, error)
	// SegmentFile returns the path of segment seg of tenant's log.
	SegmentFile(tenant string, seg uint64) string
	// Blocks calls fn with each block of segment seg of tenant's log, in
	// order, its SHA-256 computed from the bytes the file holds now.
	Blocks(ctx context.Context, tenant string, seg uint64, fn func(LogBlock) error) error
	// Cuts returns the time, unix ns, before which retention deleted
	// each tenant's calls, as the logs keep it.
	Cuts() map[string]int64
}

// blockChain is the store's side of the chaining of the call logs'
// blocks: the blocks synced and not chained yet, and where each tenant's
// chain of blocks stands.
type blockChain struct {
	log BlockLog

	mu      sync.Mutex
	pending []LogBlock
	kick    chan struct{} // one request queued at most
	stop    chan struct{}
	done    chan struct{}
	// chained is, by tenant, the last block chained (read at open,
	// moved by each commit): a block at or before it is not chained
	// again (the recovery at open and the hook may both see one).
	chained map[string]LogBlock
	// taken and inTx are the blocks the committer's transaction holds
	// (take), all of them and by tenant without those chained already.
	taken []LogBlock
	inTx  map[string][]LogBlock
}

// synced is the log's hook: it queues b and wakes the chainer.
func (bc *blockChain) synced(b LogBlock) {
	bc.mu.Lock()
	bc.pending = append(bc.pending, b)
	bc.mu.Unlock()
	select {
	case bc.kick <- struct{}{}:
	default:
	}
}

// openBlocks starts the chaining of the call log's blocks when the log is
// one (BlockLog) that syncs blocks: it chains the blocks synced and not
// chained yet (recoverBlocks) and then every block as it is synced.
func (s *Store) openBlocks(ctx context.Context, log CallLog) error {
	bl, ok := log.(BlockLog)
	if !ok {
		return nil
	}
	if _, err := s.w.ExecContext(ctx, chainBlocksTable); err != nil {
		return wrap(err)
	}
	bc := &blockChain{log: bl, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		chained: map[string]LogBlock{}}
	if !bl.ChainBlocks(bc.synced) {
		return nil // read alone: nothing is synced
	}
	chained, err := lastChained(ctx, s.w)
	if err != nil {
		return err
	}
	bc.chained = chained
	s.blocks = bc
	if err := s.recoverBlocks(ctx); err != nil {
		// The store is closed next, with no chaining loop to stop.
		s.blocks = nil
		return err
	}
	// A log opened without changing its files until the store's check
	// has passed (calllogs' Defer: a refused open leaves the data dir as
	// it found it) is repaired and started now: its torn tails cut, its
	// live segments created.
	if st, ok := bl.(interface{ Start() error }); ok {
		if err := st.Start(); err != nil {
			s.blocks = nil
			return err
		}
	}
	go s.blockLoop()
	return nil
}

// lastChained returns, by tenant, the last block chain_blocks records.
func lastChained(ctx context.Context, q blocksQueryer) (map[string]LogBlock, error) {
	rows, err := q.QueryContext(ctx, `SELECT tenant, seg, block FROM chain_blocks c
		WHERE (seg, block) = (SELECT seg, block FROM chain_blocks WHERE tenant = c.tenant ORDER BY seg DESC, block DESC LIMIT 1)`)
	if err != nil {
		return nil, wrap(err)
	}
	defer rows.Close()
	out := map[string]LogBlock{}
	for rows.Next() {
		var b LogBlock
		if err := rows.Scan(&b.Tenant, &b.Segment, &b.Block); err != nil {
			return nil, wrap(err)
		}
		out[b.Tenant] = b
	}
	return out, wrap(rows.Err())
}

// blocksQueryer reads chain_blocks and the chain (*sql.DB, *sql.Tx).
type blocksQueryer interface {
	queryer
	rowsQueryer
}

// recoverBlocks chains the blocks of every tenant's log after the last
// one chained: those a crash left synced but not chained (the log acks a
// block at its sync, the chain commits it later), and, at the first open
// of a data dir written before the chain covered the logs, every block.
// Appending them is not hiding anything: a block is chained with the
// bytes it holds now, and verify checks every later change against that.
// What this does not cover: a change made to such a block between its
// sync and this open, while no entry covered it (docs/storage.md).
func (s *Store) recoverBlocks(ctx context.Context) error {
	bc := s.blocks
	start := time.Now()
	found, err := walkBlocks(ctx, s.w, bc.log, bc.chained, false)
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return nil
	}
	bc.mu.Lock()
	bc.pending = append(found, bc.pending...)
	bc.mu.Unlock()
	n, err := s.submit(ctx, &request{blocks: true})
	if err != nil {
		return fmt.Errorf("cannot chain the blocks of the call logs: %w", err)
	}
	if s.opts.Logger != nil {
		s.opts.Logger.Info("chained the blocks of the call logs synced but not chained: "+
			"those of a crash between a block's sync and its chain entry, or every block of logs written before the chain covered them",
			"blocks", n, "elapsed", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// walkBlocks reads the blocks of every tenant's log of log from the
// segment of its last chained block (chained, by tenant) on, and returns
// those after it, not chained yet; a *LostBlocksError (ErrCallsLost) when
// blocks the chain records (chain_blocks, read through q) are missing from
// the log. readAlone says the log was opened to read alone (nothing made
// again by the open, for the error's words).
func walkBlocks(ctx context.Context, q blocksQueryer, log BlockLog, chained map[string]LogBlock, readAlone bool) ([]LogBlock, error) {
	var found []LogBlock
	lost := LostBlocksError{Files: log.SegmentFile, ReadAlone: readAlone}
	tenants := log.Tenants()
	for _, tenant := range tenants {
		segs, err := log.Segments(tenant)
		if err != nil {
			return nil, err
		}
		last, had := chained[tenant]
		held := map[uint64]int{} // blocks of the segments from the last chained one's
		for _, seg := range segs {
			if had && seg < last.Segment {
				continue
			}
			err := log.Blocks(ctx, tenant, seg, func(b LogBlock) error {
				held[seg]++
				if !had || b.after(last.Segment, last.Block) {
					found = append(found, b)
				}
				return nil
			})
			if err != nil {
				verb := "chain"
				if readAlone {
					verb = "check"
				}
				return nil, fmt.Errorf("cannot %s the blocks of the call log of tenant %q: %w", verb, tenant, err)
			}
		}
		if had {
			if err := checkLost(ctx, q, tenant, last, segs, held, &lost); err != nil {
				return nil, err
			}
		}
	}
	// A tenant whose whole log is gone (its directory) has chained blocks
	// and no log.
	for tenant, last := range chained {
		if !slices.Contains(tenants, tenant) {
			if err := checkLost(ctx, q, tenant, last, nil, nil, &lost); err != nil {
				return nil, err
			}
		}
	}
	if len(lost.Segments) > 0 {
		return nil, &lost
	}
	return found, nil
}

// blocksWait is how long blockLoop leaves the blocks synced to the next
// commit of results (serve's pipeline commits every 100 ms under load),
// which chains them in its transaction, before it asks for a transaction
// of their own: a transaction a block, each with its sync, cut what
// serve acknowledged by half under load (docs/benchmarks.md, "The chain
// over the call logs").
const blocksWait = 250 * time.Millisecond

// blockLoop asks the committer to chain the blocks still pending
// blocksWait after the hook queued some, until stopBlocks.
func (s *Store) blockLoop() {
	bc := s.blocks
	defer close(bc.done)
	t := time.NewTimer(blocksWait)
	t.Stop()
	for {
		select {
		case <-bc.stop:
			t.Stop()
			return
		case <-bc.kick:
			t.Reset(blocksWait)
			select {
			case <-bc.stop:
				t.Stop()
				return
			case <-t.C:
			}
		}
		bc.mu.Lock()
		pending := len(bc.pending)
		bc.mu.Unlock()
		if pending > 0 {
			// An error is kept: the blocks stay pending for the next try,
			// and the next open chains them in any case.
			s.submit(context.Background(), &request{blocks: true})
		}
	}
}

// stopBlocks stops blockLoop; the committer chains what is left at Close.
func (s *Store) stopBlocks() {
	if s.blocks == nil {
		return
	}
	close(s.blocks.stop)
	<-s.blocks.done
}

// chainBlocksStep chains the pending blocks in a transaction of their
// own and returns how many it chained; the committer runs it when no
// commit of results came to take them (blockLoop). On an error they stay
// pending.
func (s *Store) chainBlocksStep() (int64, error) {
	bc := s.blocks
	if bc == nil {
		return 0, nil
	}
	by, n := bc.take()
	if n == 0 {
		return 0, nil
	}
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		bc.settle(false)
		return 0, wrap(err)
	}
	defer tx.Rollback()
	if err := writeBlocks(ctx, tx, by, time.Now()); err != nil {
		bc.settle(false)
		return 0, err
	}
	err = wrap(tx.Commit())
	bc.settle(err == nil)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// take moves the pending blocks to the committer's transaction, by
// tenant, leaving out those chained already; settle says how it ended.
// Only the committer calls them.
func (bc *blockChain) take() (map[string][]LogBlock, int64) {
	bc.mu.Lock()
	bc.taken = bc.pending
	bc.pending = nil
	bc.mu.Unlock()
	by := map[string][]LogBlock{}
	var n int64
	for _, b := range bc.taken {
		if last, ok := bc.chained[b.Tenant]; ok && !b.after(last.Segment, last.Block) {
			continue
		}
		by[b.Tenant] = append(by[b.Tenant], b)
		n++
	}
	bc.inTx = by
	return by, n
}

// settle ends a take: committed, the tenants' last chained blocks move;
// else the blocks taken are pending again, before those queued since.
func (bc *blockChain) settle(committed bool) {
	if committed {
		for tenant, bs := range bc.inTx {
			bc.chained[tenant] = bs[len(bs)-1]
		}
	} else if len(bc.taken) > 0 {
		bc.mu.Lock()
		bc.pending = append(bc.taken, bc.pending...)
		bc.mu.Unlock()
	}
	bc.taken, bc.inTx = nil, nil
}

// writeBlocks writes, in tx, the records of the blocks of each tenant (in
// log order) and one blocks entry per tenant covering them.
func writeBlocks(ctx context.Context, tx queryer, byTenant map[string][]LogBlock, now time.Time) error {
	for _, tenant := range sortedKeys(byTenant) {
		bs := byTenant[tenant]
		d := blocksDigest(bs)
		seq, err := appendEntry(ctx, tx, chain.Entry{Tenant: tenant, Kind: chain.KindBlocks, First: int64(bs[0].Segment),
			Last: int64(bs[len(bs)-1].Segment), N: int64(len(bs)), Digest: d, Time: now})
		if err != nil {
			return wrap(fmt.Errorf("cannot chain blocks: %w", err))
		}
		for _, b := range bs {
			if _, err := tx.ExecContext(ctx, sqlInsertBlock, b.Tenant, int64(b.Segment), b.Block, b.Calls, b.First, b.Last, b.SHA256[:], seq); err != nil {
				return wrap(fmt.Errorf("cannot record a block: %w", err))
			}
		}
	}
	return nil
}

// logCutRequest chains the cut retention makes of the call logs before
// the segments go.
type logCutRequest struct {
	before int64
	tenant string
	only   bool
	keep   []string
	// chained is set by chainLogCuts: the tenants whose chained cut is
	// at before or past it, the only ones the logs may cut.
	chained []string
}

// chainLogCuts appends, for every tenant of the log that c applies to, a
// logcut entry moving its cut to c.before, unless it is there already.
func (s *Store) chainLogCuts(c *logCutRequest) (int64, error) {
	if s.blocks == nil {
		return 0, nil
	}
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, wrap(err)
	}
	defer tx.Rollback()
	var n int64
	var chained []string
	for _, tenant := range s.blocks.log.Tenants() {
		if c.only && tenant != c.tenant || !c.only && slices.Contains(c.keep, tenant) {
			continue
		}
		cut, err := chainedLogCut(ctx, tx, tenant)
		if err != nil {
			return 0, wrap(err)
		}
		chained = append(chained, tenant)
		if cut >= c.before {
			continue
		}
		if _, err := appendEntry(ctx, tx, chain.Entry{Tenant: tenant, Kind: chain.KindLogCut, First: c.before, Last: c.before,
			Digest: logCutDigest(c.before)}); err != nil {
			return 0, wrap(fmt.Errorf("cannot chain a cut of the call logs: %w", err))
		}
		n++
	}
	if err := tx.Commit(); err != nil {
		return 0, wrap(err)
	}
	c.chained = chained
	return n, nil
}

// chainedLogCut returns the latest cut of tenant's call log the chain
// records (math.MinInt64 when none).
func chainedLogCut(ctx context.Context, q queryer, tenant string) (int64, error) {
	var cut int64
	err := q.QueryRowContext(ctx, `SELECT max(first) FROM chain WHERE tenant = ? AND kind = ?`, tenant, chain.KindLogCut).Scan(&sqlNullInt{&cut})
	return cut, err
}

// sqlNullInt scans an integer that may be NULL (as math.MinInt64).
type sqlNullInt struct{ v *int64 }

func (n *sqlNullInt) Scan(src any) error {
	var x sql.NullInt64
	if err := x.Scan(src); err != nil {
		return err
	}
	*n.v = minNanos
	if x.Valid {
		*n.v = x.Int64
	}
	return nil
}

const minNanos = -1 << 63

// LostBlocksError is Open's error when blocks the chain records as synced
// are missing from the call logs on disk (ErrCallsLost): by segment, the
// blocks and calls missing.
type LostBlocksError struct {
	Segments []LostSegment
	// Files names a segment's file (BlockLog.SegmentFile).
	Files func(tenant string, seg uint64) string
	// ReadAlone is set when the log was opened to read alone
	// (CheckCallLogs): its open made no segment again.
	ReadAlone bool
}

// LostSegment is the blocks of one segment the chain records and the log
// lacks: ranks First to Last, Blocks of them, holding Calls calls.
type LostSegment struct {
	Tenant              string
	Segment             uint64
	First, Last, Blocks int
	Calls               int64
	Gone                bool // the segment's file is not in the log at all
}

// Missing says which blocks and calls are missing, by segment file, and
// how many in all, without what to do about it.
func (e *LostBlocksError) Missing() string {
	var b strings.Builder
	b.WriteString(ErrCallsLost.Error() + ":")
	var blocks int
	var calls int64
	for _, g := range e.Segments {
		what := "cut short, or removed"
		switch {
		case g.Gone:
			what = "gone"
		case e.ReadAlone:
			what = "cut short or emptied"
		}
		fmt.Fprintf(&b, " tenant %q, %s (%s): blocks %d-%d of it the chain records as synced are missing (%d blocks, %d calls);",
			g.Tenant, e.Files(g.Tenant, g.Segment), what, g.First, g.Last, g.Blocks, g.Calls)
		blocks += g.Blocks
		calls += g.Calls
	}
	fmt.Fprintf(&b, " %d blocks, %d calls in all", blocks, calls)
	return b.String()
}

func (e *LostBlocksError) Error() string {
	return e.Missing() + ". Serve does not start on them: put the segment files back (from a copy, or " +
		"mcpaudit restore of a backup taken before), or move the data dir aside and start on a new one (mcpaudit verify, " +
		"export --data-dir and the other readers still read it); new blocks would take the places the chain records for the lost ones " +
		"(docs/storage.md, \"A call log that lost synced blocks\")"
}

func (e *LostBlocksError) Unwrap() error { return ErrCallsLost }

// checkLost adds to lost the blocks of tenant's log the chain records and
// the log lacks, last being the tenant's last chained block, segs the
// log's segments and held the blocks it holds of those from last's on.
// Only the segments after the log's last one before last's are looked at:
// the sealed segments before are whole (their index, checked at the
// log's open, names their blocks). A segment gone whose chained blocks are
// all before the tenant's chained cut, numbered below a segment on disk,
// is retention's.
func checkLost(ctx context.Context, q blocksQueryer, tenant string, last LogBlock, segs []uint64, held map[uint64]int, lost *LostBlocksError) error {
	if slices.Contains(segs, last.Segment) && held[last.Segment] > last.Block {
		return nil // the log holds the last chained block: nothing before it is lost
	}
	from := uint64(0)
	for _, seg := range segs {
		if seg < last.Segment {
			from = seg + 1
		}
	}
	if slices.Contains(segs, last.Segment) {
		from = last.Segment
	}
	cut, err := chainedLogCut(ctx, q, tenant)
	if err != nil {
		return wrap(err)
	}
	rows, err := q.QueryContext(ctx, `SELECT seg, block, calls, last FROM chain_blocks WHERE tenant = ? AND seg >= ? ORDER BY seg, block`,
		tenant, int64(from))
	if err != nil {
		return wrap(err)
	}
	defer rows.Close()
	var segsLost []LostSegment
	var maxLast []int64
	for rows.Next() {
		var seg int64
		var block int
		var calls, lastT int64
		if err := rows.Scan(&seg, &block, &calls, &lastT); err != nil {
			return wrap(err)
		}
		present := slices.Contains(segs, uint64(seg))
		if present && block < held[uint64(seg)] {
			continue
		}
		n := len(segsLost)
		if n == 0 || segsLost[n-1].Segment != uint64(seg) {
			segsLost = append(segsLost, LostSegment{Tenant: tenant, Segment: uint64(seg), First: block, Gone: !present})
			maxLast = append(maxLast, lastT)
			n++
		}
		g := &segsLost[n-1]
		g.Last, g.Blocks, g.Calls = block, g.Blocks+1, g.Calls+calls
		maxLast[n-1] = max(maxLast[n-1], lastT)
	}
	if err := rows.Err(); err != nil {
		return wrap(err)
	}
	// Retention removes sealed segments alone, never the log's last (its
	// live segment), and the log numbers new segments past those on disk:
	// a segment gone with none on disk numbered past it is not
	// retention's, whatever its calls' times (review52: a quiet tenant's
	// live segment, all before the cut, removed; the log then started
	// again at segment 1).
	var top uint64
	if len(segs) > 0 {
		top = slices.Max(segs)
	}
	for i, g := range segsLost {
		if g.Gone && maxLast[i] < cut && len(segs) > 0 && g.Segment < top {
			continue // retention's: wholly before the chained cut
		}
		lost.Segments = append(lost.Segments, g)
	}
	return nil
}

// keepChainRecords, set by a test alone, makes retention do what the
// releases before chainret52 did: no record of a block is removed, and no
// blocks or logcut entry is cut. The data dir it writes is one such a
// release left, which this one's first retention pass prunes
// (TestRetention_PrunesAStoreOfTheReleaseBefore); no binary fixture of an
// older release is kept.
var keepChainRecords bool

// logFloor is where a tenant's call log starts on disk after retention
// removed segments: its first segment (none: it holds none).
type logFloor struct {
	first uint64
	none  bool
}

// logFloors returns, by tenant of the log, its first segment on disk.
func (bc *blockChain) logFloors() (map[string]logFloor, error) {
	out := map[string]logFloor{}
	for _, tenant := range bc.log.Tenants() {
		segs, err := bc.log.Segments(tenant)
		if err != nil {
			return nil, err
		}
		f := logFloor{none: len(segs) == 0}
		if len(segs) > 0 {
			f.first = segs[0]
		}
		out[tenant] = f
	}
	return out, nil
}

// pruneBlocks deletes, in tx, the records of the blocks retention removed
// with their segments: those of each tenant of floors in segments before
// its first one on disk (floors were read after the logs cut, and
// retention alone removes segments, oldest first) and wholly before the
// cut of its log the chain records, the blocks verify counts as
// retention's. A segment gone past the chained cut keeps its records:
// verify reports it. It returns the records removed, by blocks entry, for
// the entries the cut does not pass to keep as chain_pruned records
// (verify needs their hashes to check the entry's digest).
func pruneBlocks(ctx context.Context, tx *sql.Tx, floors map[string]logFloor) (pruning, error) {
	pr := pruning{}
	for _, tenant := range sortedKeys(floors) {
		f := floors[tenant]
		cut, err := chainedLogCut(ctx, tx, tenant)
		if err != nil {
			return nil, err
		}
		if cut == minNanos {
			continue // no cut chained: retention removed nothing
		}
		where := ` WHERE tenant = ? AND last < ?`
		args := []any{tenant, cut}
		if !f.none {
			where += ` AND seg < ?`
			args = append(args, int64(f.first))
		}
		rows, err := tx.QueryContext(ctx, `SELECT seg, block, calls, first, last, hash, entry FROM chain_blocks`+where, args...)
		if err != nil {
			return nil, err
		}
		n := 0
		for rows.Next() {
			b := LogBlock{Tenant: tenant}
			var seg, entry int64
			var h []byte
			if err := rows.Scan(&seg, &b.Block, &b.Calls, &b.First, &b.Last, &h, &entry); err != nil {
				rows.Close()
				return nil, err
			}
			b.Segment = uint64(seg)
			copy(b.SHA256[:], h)
			pr.add(tenant, entry, blockRow(b.Segment, b.Block), blockHash(&b))
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if n == 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM chain_blocks`+where, args...); err != nil {
			return nil, err
		}
	}
	return pr, nil
}

// blockRow is the row of a chain_pruned record of a block: 'k', then its
// segment and rank, big-endian, so that records sort in log order.
func blockRow(seg uint64, blk int) []byte {
	b := make([]byte, 17)
	b[0] = 'k'
	binary.BigEndian.PutUint64(b[1:], seg)
	binary.BigEndian.PutUint64(b[9:], uint64(blk))
	return b
}

// parseBlockRow is blockRow's inverse; ok is false for another row.
func parseBlockRow(row []byte) (seg uint64, blk int, ok bool) {
	if len(row) != 17 || row[0] != 'k' {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(row[1:]), int(binary.BigEndian.Uint64(row[9:])), true
}
