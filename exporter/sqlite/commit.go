package sqlite

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
)

// Rows are encoded by the caller's goroutine (compression is most of the
// CPU an append costs, and callers run in parallel); the committer only
// executes statements.
type callRow struct {
	id     any // packID(callPrefix, ...)
	tenant string
	time   int64
	rec    []byte
	docs   []int32
	// session is the session_minutes row of the call; ok is false when
	// it has no session.
	session sessionMinute
	ok      bool
}

type writeRow struct {
	callID                                                         any
	seq                                                            int
	time, stateTime                                                int64
	state, server, tenant, session, tool, doc, key, reason, action string
}

// tooLateRow is a row of too_late: a call counted too late to be judged.
type tooLateRow struct {
	tenant string
	callID any // packID(callPrefix, ...)
	time   int64
}

type findingRow struct {
	id                                any // packID(findingPrefix, ...)
	time                              int64
	kind                              string
	severity                          int
	server, tenant, doc, key, session string
	body                              []byte
}

// Tables that retention deletes from, in this order.
const (
	tableCalls = iota
	tableWrites
	tableFindings
	tableTooLate
	tableCount
)

// request is one unit of work for the committer. A batch of requests
// shares one transaction, except deletes, which run alone.
type request struct {
	calls     []callRow
	writes    []writeRow
	findings  []findingRow
	tooLate   []tooLateRow
	watermark int64 // zeroTime: unchanged
	del       *deleteRequest
	chainOp   *chainRequest
	// blocks asks for the call log's pending blocks to be chained
	// (chainBlocksStep); logCut for a cut of the call logs (chainLogCuts).
	blocks bool
	logCut *logCutRequest
	// keep holds answered copies of stored unanswered calls, to keep
	// aside until the engine takes them (keepAnswersStep); keepDiffer is
	// set by the step: the indexes in keep of those that met another
	// response kept for their call.
	keep       []callRow
	keepDiffer []int
	// answered names the calls whose answer kept aside the engine took
	// (audit.Results.Answered): the commit puts it in their place.
	answered []answerRef
	stored   int64      // calls stored for the first time, set by the commit
	done     chan reply // buffered: the committer never blocks on it
	// compare asks the commit for skipped: the indexes in calls of the
	// calls it did not store, their key being stored (AppendCallsCompared).
	compare bool
	skipped []int
}

type deleteRequest struct {
	table  int
	before int64
	// Which tenants: only this one when only is set, else every tenant
	// but those in keep.
	tenant string
	only   bool
	keep   []string
	// from is where the previous chunk stopped (a time); the committer
	// sets next, where this one stopped, and full, whether it stopped at
	// the chunk size.
	from int64
	next int64
	full bool
}

// chainRequest cuts the chains after retention (cut) and signs a
// checkpoint when the heads moved since the last one (or force).
type chainRequest struct {
	cut    bool
	before int64
	force  bool
	// floors, with cut, are where the tenants' call logs start on disk
	// after retention removed segments: the records of the blocks before
	// them go (pruneBlocks). Nil with no chained call log.
	floors map[string]logFloor
}

type reply struct {
	n   int64
	err error
}

// Ids of calls ("c_") and findings ("f_") are 20 hex digits of a hash
// behind their prefix: a table keyed by one kind stores such an id as its
// 10 bytes, any other id as text. SQLite never compares a blob equal to a
// text, so the two forms cannot collide; and packed ids sort as their text.
const (
	callPrefix    = "c_"
	findingPrefix = "f_"
)

// packID returns the stored form of an id of the given prefix.
func packID(prefix, id string) any {
	if len(id) == 22 && id[:2] == prefix && isLowerHex(id[2:]) {
		b, _ := hex.DecodeString(id[2:]) // checked by isLowerHex
		return b
	}
	return id
}

// unpackID is the inverse of packID.
func unpackID(prefix string, v any) string {
	switch v := v.(type) {
	case []byte:
		return prefix + hex.EncodeToString(v)
	case string:
		return v
	}
	return fmt.Sprint(v)
}

// docHash keys the timeline index: 32 bits are enough because every hit is
// checked against the document names in the call's record.
func docHash(doc string) int32 {
	// FNV-1a, as hash/fnv's New32a computes it, without its allocations.
	h := uint32(2166136261)
	for i := 0; i < len(doc); i++ {
		h ^= uint32(doc[i])
		h *= 16777619
	}
	return int32(h)
}

// clampNanos stores t for a range condition: times beyond what nanoseconds
// hold become the extremes.
func clampNanos(t time.Time) int64 {
	if n, ok := nanos(t); ok {
		return n
	}
	if t.Before(minTime) {
		return math.MinInt64 + 1
	}
	return math.MaxInt64
}

func encodeCalls(calls []audit.Record) ([]callRow, error) {
	rows := make([]callRow, 0, len(calls))
	// The calls' blobs are compressed one after the other into scratch
	// space, then copied into one allocation of their size: ends[i] is
	// where row i's ends.
	sp := blobScratch.Get().(*[]byte)
	var buf, tmp []byte
	blobs := (*sp)[:0]
	ends := make([]int, 0, len(calls))
	for i := range calls {
		r := &calls[i]
		if r.Call == nil {
			return nil, fmt.Errorf("call record %d has no call", i)
		}
		if r.Call.ID == "" {
			return nil, fmt.Errorf("call record %d has no id", i)
		}
		t, ok := nanos(r.Call.Time)
		if !ok {
			return nil, fmt.Errorf("call %s: time %s is out of range", r.Call.ID, r.Call.Time)
		}
		buf = appendRecord(buf[:0], r)
		row := callRow{id: packID(callPrefix, r.Call.ID), tenant: r.Call.Tenant, time: t}
		blobs, tmp = appendCompressed(blobs, tmp, buf)
		ends = append(ends, len(blobs))
		if r.Call.Session != "" {
			row.session, row.ok = sessionMinute{sessionHash(r.Call.Session), bucketOf(t)}, true
		}
		row.docs = docHashes(nil, r)
		rows = append(rows, row)
	}
	all := make([]byte, len(blobs))
	copy(all, blobs)
	if cap(blobs) <= maxBlobScratch {
		*sp = blobs[:0]
		blobScratch.Put(sp)
	}
	start := 0
	for i, end := range ends {
		rows[i].rec = all[start:end:end]
		start = end
	}
	return rows, nil
}

// blobScratch holds the scratch space of encodeCalls, up to maxBlobScratch
// bytes each.
var blobScratch = sync.Pool{New: func() any { return new([]byte) }}

const maxBlobScratch = 4 << 20

func encodeResults(r *audit.Results) (*request, error) {
	req := &request{watermark: zeroTime, writes: make([]writeRow, 0, len(r.Writes))}
	var tmp []byte // the compressor's scratch space
	for i := range r.Writes {
		w := &r.Writes[i]
		t, ok1 := nanos(w.Time)
		st, ok2 := nanos(w.StateTime)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("write %s/%d: time out of range", w.CallID, w.Seq)
		}
		if w.Time.IsZero() {
			return nil, fmt.Errorf("write %s/%d has no time", w.CallID, w.Seq)
		}
		row := writeRow{
			callID: packID(callPrefix, w.CallID), seq: w.Seq, time: t,
			state: string(w.State), server: w.Server, tenant: w.Tenant, tool: w.Tool,
			reason: string(w.Reason), action: string(w.Action), session: w.Session, doc: w.Document, key: w.Key,
		}
		if !w.StateTime.IsZero() {
			if (st > t && st-t < 0) || (st < t && st-t > 0) {
				return nil, fmt.Errorf("write %s/%d: state time too far from time", w.CallID, w.Seq)
			}
			row.stateTime = st - t
		}
		req.writes = append(req.writes, row)
	}
	for i := range r.Findings {
		f := &r.Findings[i]
		t, ok := nanos(f.Time)
		if !ok {
			return nil, fmt.Errorf("finding %s: time %s is out of range", f.ID(), f.Time)
		}
		body, err := json.Marshal(findingBody{Severity: f.Severity, Calls: f.Calls, Reason: f.Reason,
			RetryAction: f.RetryAction, Summary: f.Summary})
		if err != nil {
			return nil, fmt.Errorf("finding %s: %w", f.ID(), err)
		}
		body, tmp = appendCompressed(nil, tmp, body)
		req.findings = append(req.findings, findingRow{
			id: packID(findingPrefix, f.ID()), time: t, kind: string(f.Kind), severity: f.Severity.Rank(),
			server: f.Server, tenant: f.Tenant, doc: f.Document, key: f.Key, session: f.Session, body: body,
		})
	}
	for _, c := range r.TooLate {
		t, ok := nanos(c.Time)
		if !ok {
			return nil, fmt.Errorf("call %s too late: time %s is out of range", c.ID, c.Time)
		}
		req.tooLate = append(req.tooLate, tooLateRow{tenant: c.Tenant, callID: packID(callPrefix, c.ID), time: t})
	}
	for _, c := range r.Answered {
		req.answered = append(req.answered, answerRef{tenant: c.Tenant, id: packID(callPrefix, c.ID)})
	}
	if !r.Watermark.IsZero() {
		t, ok := nanos(r.Watermark)
		if !ok {
			return nil, fmt.Errorf("watermark %s is out of range", r.Watermark)
		}
		req.watermark = t
	}
	return req, nil
}

// AppendCalls stores calls durably. The calls of concurrent callers are
// committed together in one transaction by the committer goroutine; with
// Ack "commit" each caller returns once the transaction holding its calls
// has committed (with the default synchronous=full, once the log is
// synced), or with the error that failed it; with Ack "log", once its
// calls are synced to the call log (acklog.go), which the committer
// drains behind. A call whose id is stored is skipped; the count returned
// is of the calls stored for the first time, the same with either Ack. A
// full call log fails with audit.ErrUnavailable (wrapping spool.ErrFull),
// calls that never fit it (more than log_max_bytes) with audit.ErrTooLarge.
// When ctx ends first, AppendCalls returns its error, and the calls may or
// may not be committed: retrying is safe.
func (s *Store) AppendCalls(ctx context.Context, calls []audit.Record) (int, error) {
	n, _, _, err := s.appendCalls(ctx, calls, false)
	return n, err
}

// appendCalls is AppendCalls; with compare it also returns the calls'
// rows and the indexes of the calls it skipped as stored (or as earlier
// in calls).
func (s *Store) appendCalls(ctx context.Context, calls []audit.Record, compare bool) (int, []callRow, []int, error) {
	if s.opts.Calls == CallsLog {
		return s.appendLogged(ctx, calls, compare)
	}
	rows, err := encodeCalls(calls)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("cannot append calls: %w", err)
	}
	if len(rows) == 0 {
		if s.closed.Load() {
			return 0, nil, nil, errClosed("append calls")
		}
		return 0, nil, nil, nil
	}
	if s.clog != nil {
		var skipped *[]int
		var idx []int
		if compare {
			skipped = &idx
		}
		n, err := s.appendLog(ctx, rows, skipped)
		err = s.fail("append calls", err)
		s.noteCalls(err, rows)
		return int(n), rows, idx, err
	}
	req := &request{calls: rows, watermark: zeroTime, compare: compare}
	n, err := s.submit(ctx, req)
	if err != nil {
		err = s.fail("append calls", err)
		s.noteCalls(err, rows)
		return 0, nil, nil, err
	}
	s.noteCalls(nil, rows)
	return int(n), rows, req.skipped, nil
}

// Commit stores detector output and the watermark in one transaction,
// which it may share with appended calls.
func (s *Store) Commit(ctx context.Context, r audit.Results) error {
	req, err := encodeResults(&r)
	if err != nil {
		return fmt.Errorf("cannot commit results: %w", err)
	}
	_, err = s.submit(ctx, req)
	return s.fail("commit results", err)
}

// DeleteBefore removes every call, write and finding whose Time is before
// t, except those of the tenants in keep (which have retentions of their
// own), in transactions of at most Options.DeleteChunk rows each, so that
// appends wait for one chunk at most. It returns the rows deleted (calls,
// writes and findings) and stops early when ctx ends. With Ack "log" it
// first waits, as a query does (LogWait), for the calls acknowledged
// before it to be committed, unless the drain fails (expire).
func (s *Store) DeleteBefore(ctx context.Context, t time.Time, keep ...string) (int64, error) {
	return s.expire(ctx, deleteRequest{before: clampNanos(t), keep: keep})
}

// DeleteTenantBefore removes the calls, writes and findings of one tenant
// whose Time is before t, in chunks as DeleteBefore does.
func (s *Store) DeleteTenantBefore(ctx context.Context, tenant string, t time.Time) (int64, error) {
	return s.expire(ctx, deleteRequest{before: clampNanos(t), tenant: tenant, only: true})
}

func (s *Store) expire(ctx context.Context, d deleteRequest) (int64, error) {
	// Calls acknowledged from the call log are deleted as committed ones
	// are: the drain would otherwise store them after the delete. Not
	// while the drain fails, nor past LogWait: retention is what frees
	// pages for a drain that fails on a full disk, and the few calls
	// older than t left in the log go at the next pass (found by review:
	// each pass failed after LogWait while the drain did).
	if s.clog != nil {
		if _, failed := s.clog.nextProgress(); failed == nil {
			if err := s.caughtUp(ctx, "delete old rows"); err != nil && ctx.Err() != nil {
				return 0, s.fail("delete old rows", ctx.Err())
			}
		}
	}
	var total int64
	for table := range tableCount {
		d.table, d.from = table, math.MinInt64
		for {
			if err := ctx.Err(); err != nil {
				return total, s.fail("delete old rows", err)
			}
			chunk := d
			n, err := s.submit(ctx, &request{del: &chunk})
			if table != tableTooLate {
				// The references to calls too late go with their calls,
				// uncounted: they are no rows of the audit.
				total += n
			}
			if err != nil {
				return total, s.fail("delete old rows", err)
			}
			if !chunk.full {
				break
			}
			d.from = chunk.next
		}
	}
	if s.opts.Calls == CallsLog {
		// The cut is chained before any segment goes: verify takes a
		// segment missing for retention's only when the chain records a
		// cut past it.
		lc := &logCutRequest{before: d.before, tenant: d.tenant, only: d.only, keep: d.keep}
		if _, err := s.submit(ctx, &request{logCut: lc}); err != nil {
			return total, s.fail("chain the cut of the call logs", err)
		}
		// Whole segments: calls before t stay until their segment is
		// sealed and wholly before t. With the blocks chained, only the
		// tenants whose cut is chained are cut: a log created since
		// they were listed waits for the next pass.
		var n int64
		var err error
		if s.blocks != nil {
			n, err = s.blocks.log.DeleteTenantsBefore(fromNanos(d.before), lc.chained)
		} else {
			n, err = s.opts.CallLog.DeleteBefore(fromNanos(d.before), d.tenant, d.only, d.keep)
		}
		total += n
		if err != nil {
			return total, s.fail("delete old calls", err)
		}
	}
	// Entries whose rows all went leave the chains, and the records of
	// the blocks of the segments removed go; the cut is signed at once,
	// so that the removal is on record.
	c := &chainRequest{cut: true, before: d.before, force: true}
	if s.blocks != nil {
		floors, err := s.blocks.logFloors()
		if err != nil {
			return total, s.fail("cut the chains", err)
		}
		c.floors = floors
	}
	if _, err := s.submit(ctx, &request{chainOp: c}); err != nil {
		return total, s.fail("cut the chains", err)
	}
	return total, nil
}

// chainStep runs a chainRequest in one transaction.
func (s *Store) chainStep(c *chainRequest) (int64, error) {
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, wrap(err)
	}
	defer tx.Rollback()
	if s.signable == nil {
		// The cuts found at the start are signed by its first checkpoint:
		// those a keyless serve made (docs/storage.md), and, unavoidably,
		// any written into the file while no serve ran.
		cuts, err := loadCuts(ctx, tx)
		if err != nil {
			return 0, wrap(err)
		}
		s.signable = map[cutID]bool{}
		for _, c := range cuts {
			s.signable[idOf(c)] = true
		}
	}
	var n int
	moved := !c.cut
	if c.cut {
		was, err := loadCuts(ctx, tx)
		if err != nil {
			return 0, wrap(err)
		}
		var blocks pruning
		if c.floors != nil && !keepChainRecords {
			if blocks, err = pruneBlocks(ctx, tx, c.floors); err != nil {
				return 0, wrap(fmt.Errorf("cannot remove the records of the blocks retention removed: %w", err))
			}
		}
		var starts map[string]int64
		if n, starts, err = cutChains(ctx, tx, c.before, blocks); err != nil {
			return 0, wrap(err)
		}
		// The records of blocks of entries the cut did not pass are kept
		// as removed rows' are: verify needs their hashes.
		for k := range blocks {
			if k.seq < starts[k.tenant] {
				delete(blocks, k)
			}
		}
		kept := len(blocks)
		if err := blocks.store(ctx, tx, time.Now()); err != nil {
			return 0, wrap(err)
		}
		moved = n > 0 || kept > 0
		now, err := loadCuts(ctx, tx)
		if err != nil {
			return 0, wrap(err)
		}
		for t, c := range now {
			// Made by this transaction (no one else writes within it).
			if idOf(was[t]) != idOf(c) {
				s.signable[idOf(c)] = true
			}
		}
	}
	signable := func(c chain.Cut) bool {
		if s.signable[idOf(c)] {
			return true
		}
		// Not in the file when this store opened, and not made by it: a
		// keyed serve signs the cuts it makes at once, so this one was
		// written by someone else; left to verify, which reports it.
		if s.opts.Logger != nil {
			s.opts.Logger.Warn("sqlite: a chain cut this store did not make is left unsigned", "tenant", c.Tenant, "seq", c.Seq,
				"before", c.Before.UTC().Format(time.RFC3339))
		}
		return false
	}
	if err := checkpoint(ctx, tx, s.opts.SigningKey, time.Now(), c.force && moved, signable); err != nil {
		return 0, wrap(err)
	}
	return int64(n), wrap(tx.Commit())
}

// cutID names one cut: its tenant, start, that start's prev and cutoff.
type cutID struct {
	tenant string
	seq    int64
	prev   string
	before int64
}

func idOf(c chain.Cut) cutID { return cutID{c.Tenant, c.Seq, c.Prev, c.Before.UnixNano()} }

// Checkpoint signs the chains' heads now, when they moved since the last
// checkpoint; serve calls it every CheckpointEvery and at Close. Without a
// signing key it does nothing.
func (s *Store) Checkpoint(ctx context.Context) error {
	if s.opts.SigningKey == nil {
		return nil
	}
	_, err := s.submit(ctx, &request{chainOp: &chainRequest{}})
	return s.fail("sign a checkpoint", err)
}

// submit queues req for the committer and waits for its reply.
func (s *Store) submit(ctx context.Context, req *request) (int64, error) {
	return s.send(ctx, req, false)
}

// send is submit; the drain of the call log sets closing, as it also runs
// while Close waits for it, before the committer stops.
func (s *Store) send(ctx context.Context, req *request, closing bool) (int64, error) {
	req.done = make(chan reply, 1)
	s.mu.RLock()
	if s.closed.Load() && !closing {
		s.mu.RUnlock()
		return 0, audit.ErrClosed
	}
	select {
	case s.reqs <- req:
	case <-ctx.Done():
		s.mu.RUnlock()
		return 0, ctx.Err()
	}
	s.mu.RUnlock()
	if req.compare || req.keep != nil {
		// Taken by the committer, which replies to every request: the
		// serve pipeline's append and the answers it keeps aside are
		// waited for whatever the sender does, as the engine takes what
		// they report (AppendCallsAnswered). Told "canceled" after its
		// calls were stored, the pipeline dropped them from the engine,
		// and their re-send, held by the store, could come too late.
		r := <-req.done
		return r.n, r.err
	}
	select {
	case r := <-req.done:
		return r.n, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// commitLoop is the committer: it takes requests in arrival order, groups
// consecutive appends and commits into one transaction until the batch
// holds MaxBatch calls or nothing more is queued (after waiting up to
// MaxDelay when that is set), commits, and replies to every request of the
// batch. It exits when Close has closed reqs and the queue is drained.
func (s *Store) commitLoop() {
	defer close(s.done)
	var next *request
	for {
		req := next
		next = nil
		if req == nil {
			var ok bool
			if req, ok = <-s.reqs; !ok {
				return
			}
		}
		if req.del != nil {
			n, err := s.deleteChunk(req.del)
			req.done <- reply{n: n, err: err}
			continue
		}
		if req.chainOp != nil {
			n, err := s.chainStep(req.chainOp)
			req.done <- reply{n: n, err: err}
			continue
		}
		if req.blocks {
			n, err := s.chainBlocksStep()
			req.done <- reply{n: n, err: err}
			continue
		}
		if req.logCut != nil {
			n, err := s.chainLogCuts(req.logCut)
			req.done <- reply{n: n, err: err}
			continue
		}
		if req.keep != nil {
			var err error
			req.keepDiffer, err = s.keepAnswersStep(req.keep)
			req.done <- reply{err: err}
			continue
		}
		batch := []*request{req}
		calls := len(req.calls)
		var timeout <-chan time.Time
		var timer *time.Timer
		if s.opts.MaxDelay > 0 {
			timer = time.NewTimer(s.opts.MaxDelay)
			timeout = timer.C
		}
	gather:
		for calls < s.opts.MaxBatch {
			var r *request
			var ok bool
			select {
			case r, ok = <-s.reqs:
			default:
				if timeout == nil {
					break gather
				}
				select {
				case r, ok = <-s.reqs:
				case <-timeout:
					break gather
				}
			}
			switch {
			case !ok:
				break gather
			case r.del != nil || r.chainOp != nil || r.keep != nil || r.blocks || r.logCut != nil:
				next = r
				break gather
			}
			batch = append(batch, r)
			calls += len(r.calls)
		}
		if timer != nil {
			timer.Stop()
		}
		err := s.commitBatch(batch, calls)
		for _, r := range batch {
			r.done <- reply{n: r.stored, err: err}
		}
	}
}

const (
	sqlInsertCall = `INSERT OR IGNORE INTO calls (id, tenant, time, rec) VALUES (?, ?, ?, ?)`
	// The last rid given out, stored or not: AUTOINCREMENT's next is one
	// past the larger of its sequence and the largest rid.
	sqlCallsSeq = `SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'calls'), 0),
		coalesce((SELECT max(rid) FROM calls), 0))`
	// The calls stored after a rid, with their key.
	sqlCallsAfter  = `SELECT rid, id, tenant, time FROM calls WHERE rid > ?`
	sqlUpsertWrite = `INSERT INTO writes (call_id, seq, time, state, server, tenant, tool, reason, action,
			session, document, key, state_after)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (time, call_id, seq, tenant) DO UPDATE SET state = excluded.state,
			server = excluded.server, tool = excluded.tool, reason = excluded.reason,
			action = excluded.action, session = excluded.session, document = excluded.document,
			key = excluded.key, state_after = excluded.state_after`
	sqlIntern        = `INSERT INTO strs (s) VALUES (?) ON CONFLICT (s) DO UPDATE SET s = excluded.s RETURNING id`
	sqlInsertFinding = `INSERT OR IGNORE INTO findings (id, time, kind, severity, server, tenant, document, key, session, body, chain)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	sqlInsertTooLate = `INSERT OR IGNORE INTO too_late (time, tenant, call_id) VALUES (?, ?, ?)`
	sqlSetWatermark  = `INSERT INTO meta (key, value) VALUES ('watermark', ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`
	sqlInsertSession = `INSERT OR IGNORE INTO session_minutes (sh, minute) VALUES (?, ?)`
	// The session index is complete up to the last call a commit stored.
	sqlSetIndexed = `INSERT INTO meta (key, value) VALUES ('` + sessionsIndexed + `', ?)
		ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)`
)

// intern returns the number of v in strs, adding it in tx when it is new.
// The empty string is 0.
func (s *Store) intern(tx *sql.Tx, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	if id, ok := s.strs[v]; ok {
		return id, nil
	}
	var id int64
	if err := tx.QueryRow(sqlIntern, v).Scan(&id); err != nil {
		return 0, err
	}
	if len(s.strs) >= maxInterned {
		// Not the low-cardinality values it is made for: forget them all
		// rather than grow without end. The table still answers.
		clear(s.strs)
	}
	s.strs[v] = id
	return id, nil
}

// maxInterned bounds the committer's cache of interned strings.
const maxInterned = 100000

// sessionMinute is a row of session_minutes: a session hash and a bucket.
type sessionMinute struct {
	sh     int32
	minute int64
}

// maxSessions bounds the committer's cache of the session minutes it
// stored, which saves their INSERT OR IGNORE for the next calls of the same
// session and minute.
const maxSessions = 100000

// rowStatements are the committer's multi-row statements.
type rowStatements struct {
	calls, writes, sessions *multiRow
}

// Rows per statement at most: beyond 16 to 64 the CPU per row no longer
// falls (BenchmarkRowStatements), and the statement takes longer to
// prepare. Tests set 1 to compare with one statement per row.
var (
	callsPerStatement    = 64
	writesPerStatement   = 32
	sessionsPerStatement = 64
)

func newRowStatements() *rowStatements {
	return &rowStatements{
		calls:    newMultiRow(sqlInsertCall, 4, callsPerStatement),
		writes:   newMultiRow(sqlUpsertWrite, 13, writesPerStatement),
		sessions: newMultiRow(sqlInsertSession, 2, sessionsPerStatement),
	}
}

// prepare prepares database/sql's statements not prepared yet
// (driverStatements false), outside a transaction (db has one
// connection). The driver's are prepared when first executed.
func (r *rowStatements) prepare(ctx context.Context, db *sql.DB) error {
	if driverStatements {
		return nil
	}
	for _, m := range []*multiRow{r.calls, r.writes, r.sessions} {
		if err := m.prepare(ctx, db); err != nil {
			return err
		}
	}
	return nil
}

// close closes the statements, those prepared on db's connection too
// (while the committer is stopped: db has one connection), which its
// Close would also do.
func (r *rowStatements) close(db *sql.DB) {
	for _, m := range []*multiRow{r.calls, r.writes, r.sessions} {
		m.close()
	}
	if conn, err := db.Conn(context.Background()); err == nil {
		conn.Raw(func(dc any) error {
			if wc, ok := dc.(*writerConn); ok {
				wc.closeStmts()
			}
			return nil
		})
		conn.Close()
	}
}

// pendingCall is a call row of a batch on its way into calls; rid is set
// when this row was stored, and stays 0 when it was already.
type pendingCall struct {
	req    *request
	row    *callRow
	i      int   // the row's index in req.calls
	tenant int64 // interned
	rid    int64
}

// insertCalls stores calls with multi-row INSERT OR IGNORE statements and
// sets the rid of each one stored.
//
// Each row of a statement takes the next rid in the order of its VALUES,
// stored or not (AUTOINCREMENT), as with one statement per row; so when a
// statement stored all of its n rows and the last of them got the rid n
// past the last one given out before, row j got that rid + 1 + j. This is
// the common case, and it costs no read: a RETURNING clause costs SQLite
// more per row (about 4 µs, BenchmarkRowStatements) than the statements
// save. Otherwise (copies of stored calls, or copies in the statement),
// the rows the statement stored are read back (their rids are past the
// last one given out before it) and matched to their inputs by their key
// (id, tenant, time): rows of one key are copies of one call, and only
// the first of them can have been stored (calls_key holds the key's
// millisecond), so a row read goes to the first input of its key.
func (s *Store) insertCalls(ctx context.Context, conn *sql.Conn, tx *sql.Tx, calls []pendingCall) error {
	if len(calls) == 0 {
		return nil
	}
	var seq int64
	if err := tx.QueryRowContext(ctx, sqlCallsSeq).Scan(&seq); err != nil {
		return err
	}
	m := s.rows.calls
	args := make([]any, 0, m.cols*min(len(calls), m.max))
	return m.chunks(len(calls), func(lo, hi int) error {
		chunk := calls[lo:hi]
		args = args[:0]
		for _, c := range chunk {
			args = append(args, c.row.id, c.tenant, c.row.time, c.row.rec)
		}
		res, err := m.exec(ctx, conn, tx, args)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		last, err := res.LastInsertId()
		if err != nil {
			return err
		}
		if n == int64(len(chunk)) && last == seq+n {
			for j := range chunk {
				chunk[j].rid = seq + 1 + int64(j)
			}
			seq = last
			return nil
		}
		if n > 0 {
			if err := matchStored(ctx, tx, chunk, seq); err != nil {
				return err
			}
		}
		return tx.QueryRowContext(ctx, sqlCallsSeq).Scan(&seq)
	})
}

// matchStored reads the calls stored after rid seq and sets the rid of
// the first input of each one's key in chunk.
func matchStored(ctx context.Context, tx *sql.Tx, chunk []pendingCall, seq int64) error {
	rows, err := tx.QueryContext(ctx, sqlCallsAfter, seq)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var rid, tenant, t int64
		var id any
		if err := rows.Scan(&rid, &id, &tenant, &t); err != nil {
			return err
		}
		j := 0
		for j < len(chunk) && (chunk[j].tenant != tenant || chunk[j].row.time != t || !sameID(chunk[j].row.id, id)) {
			j++
		}
		if j == len(chunk) || chunk[j].rid != 0 {
			return fmt.Errorf("cannot match stored call row %d to the calls of its statement", rid)
		}
		chunk[j].rid = rid
	}
	return rows.Err()
}

// commitBatch runs a batch in one transaction. The transaction ignores the
// callers' contexts: it is shared, and one caller giving up must not fail
// the others.
func (s *Store) commitBatch(batch []*request, calls int) error {
	start := time.Now()
	ctx := context.Background()
	if err := s.rows.prepare(ctx, s.w); err != nil {
		return wrap(err)
	}
	// The committer's connection, held for the transaction so that the
	// multi-row statements run on it through its driver (multiRow.exec);
	// given back before the id index reads through s.w.
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return wrap(err)
	}
	stored, err := s.commitOn(ctx, conn, batch, calls)
	conn.Close()
	s.completed.settle(err == nil)
	if s.blocks != nil {
		s.blocks.settle(err == nil)
	}
	if err != nil {
		return err
	}
	// Before the callers learn of the commit: a call is found by id once
	// its append returned (and would be, by the scan past the mark, even
	// when this fails).
	s.ids.add(s.w, stored)
	s.scratch.release()
	if s.opts.OnCommit != nil {
		s.opts.OnCommit(time.Since(start), calls)
	}
	return nil
}

// commitScratch is the committer's space for a batch's rows, their
// statements' arguments and their chain hashes, kept for the next batch
// (they were a tenth of the bytes serve allocated). Only the committer
// goroutine uses it.
type commitScratch struct {
	pending   []pendingCall
	writeArgs []any
	sessions  []any
	stored    []indexedCall
	hashes    []rowHash
}

// maxScratch is the most elements of each slice kept for the next batch
// (a batch holds MaxBatch calls and their writes, 2,000 by default).
const maxScratch = 1 << 15

// release forgets what the batch's slices point to and keeps their room
// up to maxScratch elements.
func (c *commitScratch) release() {
	c.pending = keep(c.pending)
	c.writeArgs = keep(c.writeArgs)
	c.sessions = keep(c.sessions)
	c.stored = keep(c.stored)
	c.hashes = keep(c.hashes)
}

func keep[T any](s []T) []T {
	if cap(s) > maxScratch {
		return nil
	}
	clear(s) // what is past len was cleared before
	return s[:0]
}

// room returns s emptied, with room for n elements.
func room[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, n)
	}
	return s[:0]
}

// commitOn runs commitBatch's transaction on conn and returns the calls it
// stored, for the id index.
func (s *Store) commitOn(ctx context.Context, conn *sql.Conn, batch []*request, calls int) (_ []indexedCall, err error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, wrap(err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
			// Strings interned and session minutes indexed by the failed
			// transaction are not stored.
			clear(s.strs)
			clear(s.sessions)
		}
	}()
	stmt := func(query string) (*sql.Stmt, error) { return tx.PrepareContext(ctx, query) }
	var insFinding *sql.Stmt
	// Strings are interned in the order in which one statement per row
	// met them (each request's call tenants, then its writes' fields), so
	// that strs numbers the same strings alike however rows are grouped.
	nWrites := 0
	for _, req := range batch {
		nWrites += len(req.writes)
	}
	sc := &s.scratch
	defer func() {
		if err != nil {
			sc.release()
		}
	}()
	pending := room(sc.pending, calls)
	writeArgs := room(sc.writeArgs, nWrites*s.rows.writes.cols)
	defer func() { sc.pending, sc.writeArgs = pending, writeArgs }()
	watermark := int64(zeroTime)
	for _, req := range batch {
		req.skipped = req.skipped[:0]
		for i := range req.calls {
			c := &req.calls[i]
			tenant, err := s.intern(tx, c.tenant)
			if err != nil {
				return nil, wrap(err)
			}
			pending = append(pending, pendingCall{req: req, row: c, i: i, tenant: tenant})
		}
		for i := range req.writes {
			w := &req.writes[i]
			var ids [6]int64
			for j, v := range [...]string{w.state, w.server, w.tenant, w.tool, w.reason, w.action} {
				if ids[j], err = s.intern(tx, v); err != nil {
					return nil, wrap(err)
				}
			}
			writeArgs = append(writeArgs, w.callID, int64(w.seq), w.time, ids[0], ids[1], ids[2], ids[3], ids[4], ids[5],
				w.session, w.doc, w.key, w.stateTime)
		}
		if req.watermark != zeroTime {
			watermark = req.watermark // the last one stands, as it would after one upsert each
		}
	}
	if err := s.insertCalls(ctx, conn, tx, pending); err != nil {
		return nil, wrap(err)
	}
	// The new calls of each tenant, in rid order, for its chain entry:
	// each tenant's slice is cut from one of all the calls stored.
	counts := map[string]int{}
	nStored := 0
	for i := range pending {
		if pending[i].rid != 0 {
			counts[pending[i].row.tenant]++
			nStored++
		}
	}
	sc.hashes = room(sc.hashes, nStored)[:nStored]
	chained := make(map[string][]rowHash, len(counts))
	off := 0
	for tenant, n := range counts {
		chained[tenant] = sc.hashes[off : off : off+n]
		off += n
	}
	var lastRID int64 // of the calls stored
	stored := room(sc.stored, nStored)
	sessions := sc.sessions[:0]
	defer func() { sc.stored, sc.sessions = stored, sessions }()
	for i := range pending {
		p := &pending[i]
		if p.rid == 0 {
			// Already stored: the caller may compare its response.
			if p.req.compare {
				p.req.skipped = append(p.req.skipped, p.i)
			}
			continue
		}
		c := p.row
		p.req.stored++
		chained[c.tenant] = append(chained[c.tenant], rowHash{row: p.rid, hash: callHash(p.rid, c.id, c.tenant, c.time, c.rec)})
		stored = append(stored, indexedCall{id: c.id, tenant: p.tenant, rid: p.rid, time: c.time, docs: c.docs,
			session: c.session.sh, hasSession: c.ok})
		lastRID = p.rid
		if _, seen := s.sessions[c.session]; c.ok && !seen {
			sessions = append(sessions, int64(c.session.sh), c.session.minute)
			if len(s.sessions) >= maxSessions {
				clear(s.sessions)
			}
			s.sessions[c.session] = struct{}{}
		}
	}
	if err := s.rows.sessions.chunks(len(sessions)/2, func(lo, hi int) error {
		_, err := s.rows.sessions.exec(ctx, conn, tx, sessions[2*lo:2*hi])
		return err
	}); err != nil {
		return nil, wrap(err)
	}
	up := s.rows.writes
	if err := up.chunks(len(writeArgs)/up.cols, func(lo, hi int) error {
		_, err := up.exec(ctx, conn, tx, writeArgs[lo*up.cols:hi*up.cols])
		return err
	}); err != nil {
		return nil, wrap(err)
	}
	// Rare: a commit without calls too late prepares nothing for them.
	var insTooLate *sql.Stmt
	for _, req := range batch {
		for _, c := range req.tooLate {
			if insTooLate == nil {
				if insTooLate, err = stmt(sqlInsertTooLate); err != nil {
					return nil, wrap(err)
				}
			}
			tenant, err := s.intern(tx, c.tenant)
			if err != nil {
				return nil, wrap(err)
			}
			if _, err := insTooLate.Exec(c.time, tenant, c.callID); err != nil {
				return nil, wrap(err)
			}
		}
	}
	for _, req := range batch {
		if len(req.answered) == 0 {
			continue
		}
		var last int64
		if stored, last, err = s.completeAnswers(ctx, tx, req.answered, chained, stored); err != nil {
			return nil, err
		}
		lastRID = max(lastRID, last)
	}
	if watermark != zeroTime {
		if _, err := tx.Exec(sqlSetWatermark, watermark); err != nil {
			return nil, wrap(err)
		}
	}
	if lastRID > 0 {
		if _, err := tx.Exec(sqlSetIndexed, lastRID); err != nil {
			return nil, wrap(err)
		}
	}
	now := time.Now()
	if err := chainCalls(ctx, tx, chained, now); err != nil {
		return nil, wrap(err)
	}
	if s.blocks != nil {
		// The call log's blocks synced since the last commit, chained
		// with it (settled by commitBatch): no transaction of their own.
		by, _ := s.blocks.take()
		if err := writeBlocks(ctx, tx, by, now); err != nil {
			return nil, err
		}
	}
	// Findings carry the seq of their tenant's entry, which follows the
	// calls entry just made.
	entrySeq := map[string]int64{}
	newFindings := map[string][]rowHash{}
	for _, req := range batch {
		if len(req.findings) > 0 && insFinding == nil {
			if insFinding, err = stmt(sqlInsertFinding); err != nil {
				return nil, wrap(err)
			}
		}
		for i := range req.findings {
			f := &req.findings[i]
			seq, ok := entrySeq[f.tenant]
			if !ok {
				last, _, err := head(ctx, tx, f.tenant)
				if err != nil {
					return nil, wrap(err)
				}
				seq = last + 1
				entrySeq[f.tenant] = seq
			}
			res, err := insFinding.Exec(f.id, f.time, f.kind, f.severity, f.server, f.tenant, f.doc, f.key, f.session, f.body, seq)
			if err != nil {
				return nil, wrap(err)
			}
			if n, _ := res.RowsAffected(); n > 0 {
				newFindings[f.tenant] = append(newFindings[f.tenant], rowHash{id: idBytes(f.id), hash: findingHash(f)})
			}
		}
	}
	for _, tenant := range sortedKeys(newFindings) {
		rows := newFindings[tenant]
		if _, err := appendEntry(ctx, tx, chain.Entry{Tenant: tenant, Kind: chain.KindFindings, N: int64(len(rows)),
			Digest: findingsDigest(rows), Time: now}); err != nil {
			return nil, wrap(err)
		}
	}
	if err = tx.Commit(); err != nil {
		return nil, wrap(err)
	}
	return stored, nil
}

// tenantCond returns the SQL condition on column that selects d's tenants
// (interned when interned is set) and its arguments.
func tenantCond(d *deleteRequest, column string, interned bool) (string, []any) {
	arg := func(t string) (string, []any) {
		if !interned {
			return "?", []any{t}
		}
		if t == "" {
			return "0", nil
		}
		return "coalesce((SELECT id FROM strs WHERE s = ?), -1)", []any{t}
	}
	if d.only {
		expr, args := arg(d.tenant)
		return " AND " + column + " = " + expr, args
	}
	if len(d.keep) == 0 {
		return "", nil
	}
	var exprs []string
	var args []any
	for _, t := range d.keep {
		e, a := arg(t)
		exprs = append(exprs, e)
		args = append(args, a...)
	}
	return " AND " + column + " NOT IN (" + strings.Join(exprs, ", ") + ")", args
}

// deleteChunk deletes at most DeleteChunk rows of one table in one
// transaction, reading the table in time order from d.from, so that rows
// kept (another tenant's) are passed over once, not at every chunk. A
// call's entries in the index go with it after the commit: the keys of
// its documents are recomputed from its record.
func (s *Store) deleteChunk(d *deleteRequest) (int64, error) {
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, wrap(err)
	}
	defer tx.Rollback()
	limit := s.opts.DeleteChunk
	var n, deletes int64
	var gone []indexedCall
	pr := pruning{}
	switch d.table {
	case tableCalls:
		if n, gone, err = deleteCalls(ctx, tx, d, limit, pr); err == nil && n > 0 {
			err = tx.QueryRowContext(ctx, sqlCountDelete).Scan(&deletes)
		}
		if err == nil {
			err = pruneSessions(ctx, tx)
			// The minutes it cached may be gone.
			clear(s.sessions)
		}
	case tableWrites:
		cond, args := tenantCond(d, "tenant", true)
		n, err = deleteKeyed(ctx, tx, d, limit, `SELECT time, call_id, seq, tenant FROM writes WHERE time >= ? AND time < ?`+cond,
			args, `DELETE FROM writes WHERE time = ? AND call_id = ? AND seq = ? AND tenant = ?`)
	case tableFindings:
		n, err = deleteFindings(ctx, tx, d, limit, pr)
	case tableTooLate:
		cond, args := tenantCond(d, "tenant", true)
		n, err = deleteKeyed(ctx, tx, d, limit, `SELECT time, tenant, call_id FROM too_late WHERE time >= ? AND time < ?`+cond,
			args, `DELETE FROM too_late WHERE time = ? AND tenant = ? AND call_id = ?`)
		if err == nil && !d.full {
			// The answers kept aside go with their calls, uncounted, in
			// the last chunk: a few rows (answers come late rarely).
			err = deleteAnswersAside(ctx, tx, d, pr)
		}
	}
	if err == nil {
		err = pr.store(ctx, tx, time.Now())
	}
	if err != nil {
		return 0, wrap(err)
	}
	if err := tx.Commit(); err != nil {
		return 0, wrap(err)
	}
	s.ids.remove(gone, deletes)
	if len(gone) > 0 {
		last := gone[0].time
		for _, c := range gone {
			last = max(last, c.time)
		}
		s.forgetDeleted(last)
	}
	return n, nil
}

// deleteKeyed deletes up to limit rows that sel (ordered by time here)
// finds from d.from, each by the key it selects (time first).
func deleteKeyed(ctx context.Context, tx *sql.Tx, d *deleteRequest, limit int, sel string, args []any, del string) (int64, error) {
	rows, err := tx.QueryContext(ctx, sel+` ORDER BY time LIMIT ?`, append([]any{d.from, d.before}, append(args, limit)...)...)
	if err != nil {
		return 0, err
	}
	cols, err := rows.Columns()
	if err != nil {
		rows.Close()
		return 0, err
	}
	var keys [][]any
	for rows.Next() {
		key := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range key {
			ptrs[i] = &key[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			rows.Close()
			return 0, err
		}
		keys = append(keys, key)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	stmt, err := tx.PrepareContext(ctx, del)
	if err != nil {
		return 0, err
	}
	defer stmt.Close()
	for _, k := range keys {
		if _, err := stmt.ExecContext(ctx, k...); err != nil {
			return 0, err
		}
		d.next = k[0].(int64)
	}
	d.full = len(keys) == limit
	return int64(len(keys)), nil
}

// pruneSessions deletes the session minutes before the oldest stored call
// (all of them when no call is left), which find nothing once retention
// deleted their calls.
func pruneSessions(ctx context.Context, tx *sql.Tx) error {
	var oldest sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT min(time) FROM calls`).Scan(&oldest); err != nil {
		return err
	}
	before := int64(math.MaxInt64)
	if oldest.Valid {
		before = bucketOf(oldest.Int64)
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM session_minutes WHERE minute < ?`, before)
	return err
}

// deleteCalls deletes up to limit calls from d.from and returns them for
// the id index.
func deleteCalls(ctx context.Context, tx *sql.Tx, d *deleteRequest, limit int, pr pruning) (int64, []indexedCall, error) {
	type victim struct {
		rid, time, tenantID int64
		id                  any
		tenant              string
		rec                 []byte
	}
	cond, args := tenantCond(d, "tenant", true)
	rows, err := tx.QueryContext(ctx, `SELECT rid, id, tenant, coalesce((SELECT s FROM strs WHERE strs.id = calls.tenant), ''), time, rec
		FROM calls WHERE time >= ? AND time < ?`+cond+` ORDER BY time LIMIT ?`,
		append([]any{d.from, d.before}, append(args, limit)...)...)
	if err != nil {
		return 0, nil, err
	}
	var vs []victim
	for rows.Next() {
		var v victim
		if err := rows.Scan(&v.rid, &v.id, &v.tenantID, &v.tenant, &v.time, &v.rec); err != nil {
			rows.Close()
			return 0, nil, err
		}
		vs = append(vs, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	delCall, err := tx.PrepareContext(ctx, `DELETE FROM calls WHERE rid = ?`)
	if err != nil {
		return 0, nil, err
	}
	var buf []byte
	gone := make([]indexedCall, len(vs))
	for i, v := range vs {
		// The keys of its documents in the index, from its record; one
		// that does not decode leaves its entries, which then point at
		// nothing and are skipped.
		gone[i] = indexedCall{id: v.id, tenant: v.tenantID, rid: v.rid, time: v.time}
		gone[i].docs, gone[i].session, gone[i].hasSession, buf = recordKeys(buf, v.rec)
		// Its entry keeps its hash, so that the rest of the entry still
		// verifies; entries that lose every row are cut (cutChains).
		seq, err := entryOf(ctx, tx, v.tenant, chain.KindCalls, v.rid)
		if err != nil {
			return 0, nil, err
		}
		if seq > 0 {
			pr.add(v.tenant, seq, v.rid, callHash(v.rid, v.id, v.tenant, v.time, v.rec))
		}
		if _, err := delCall.Exec(v.rid); err != nil {
			return 0, nil, err
		}
		d.next = v.time
	}
	d.full = len(vs) == limit
	return int64(len(vs)), gone, nil
}

// deleteFindings deletes up to limit findings from d.from, keeping each
// one's hash with its chain entry (in pr).
func deleteFindings(ctx context.Context, tx *sql.Tx, d *deleteRequest, limit int, pr pruning) (int64, error) {
	cond, args := tenantCond(d, "tenant", false)
	rows, err := tx.QueryContext(ctx, `SELECT id, time, kind, severity, server, tenant, document, key, session, body, chain
		FROM findings WHERE time >= ? AND time < ?`+cond+` ORDER BY time LIMIT ?`, append([]any{d.from, d.before}, append(args, limit)...)...)
	if err != nil {
		return 0, err
	}
	var fs []storedFinding
	for rows.Next() {
		var f storedFinding
		if err := rows.Scan(&f.id, &f.time, &f.kind, &f.severity, &f.server, &f.tenant, &f.doc, &f.key, &f.session, &f.body, &f.chain); err != nil {
			rows.Close()
			return 0, err
		}
		fs = append(fs, f)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for i := range fs {
		f := &fs[i]
		pr.add(f.tenant, f.chain, idBytes(f.id), findingHash(&f.findingRow))
		if _, err := tx.ExecContext(ctx, `DELETE FROM findings WHERE id = ?`, f.id); err != nil {
			return 0, err
		}
		if err := deleteChanges(ctx, tx, `WHERE fid = ?`, []any{f.id}, pr); err != nil {
			return 0, err
		}
		d.next = f.time
	}
	d.full = len(fs) == limit
	if !d.full {
		// The changes of findings an earlier release's retention deleted
		// (it left them, review rev19c's D2), of d's tenants, in the last
		// chunk: a finding is only changed while it is stored.
		cond, args := tenantCond(d, "tenant", false)
		if err := deleteChanges(ctx, tx, `WHERE NOT EXISTS (SELECT 1 FROM findings WHERE findings.id = finding_changes.fid)`+cond, args, pr); err != nil {
			return 0, err
		}
	}
	return int64(len(fs)), nil
}

// deleteChanges deletes the finding state changes that where selects,
// with their findings' current state, keeping each change's hash with the
// changes entry that chained it (in pr). A finding's changes go with it
// (review rev19c's D2): they are its history, read through it, and a
// changes entry that kept its rows for good kept every later cut out, so
// that the records of removed rows and their pruned entries stayed for
// good.
func deleteChanges(ctx context.Context, tx *sql.Tx, where string, args []any, pr pruning) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'finding_changes'`).Scan(&n); err != nil || n == 0 {
		return err // no finding was ever changed in this file
	}
	rows, err := tx.QueryContext(ctx, `SELECT seq, fid, tenant, state, by, note, time FROM finding_changes `+where+` ORDER BY seq`, args...)
	if err != nil {
		return err
	}
	type change struct {
		seq, t                  int64
		fid                     any
		tenant, state, by, note string
	}
	var cs []change
	for rows.Next() {
		var c change
		if err := rows.Scan(&c.seq, &c.fid, &c.tenant, &c.state, &c.by, &c.note, &c.t); err != nil {
			rows.Close()
			return err
		}
		cs = append(cs, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, c := range cs {
		seq, err := entryOf(ctx, tx, c.tenant, chain.KindChanges, c.seq)
		if err != nil {
			return err
		}
		if seq > 0 {
			pr.add(c.tenant, seq, c.seq, changeHash(c.seq, c.fid, c.tenant, c.state, c.by, c.note, c.t))
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM finding_changes WHERE seq = ?`, c.seq); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM finding_status WHERE fid = ?`, c.fid); err != nil {
			return err
		}
	}
	return nil
}

// deleteAnswersAside deletes the answers kept aside dated before d.before
// (of d's tenants), keeping each one's hash with its chain entry (in pr).
func deleteAnswersAside(ctx context.Context, tx *sql.Tx, d *deleteRequest, pr pruning) error {
	cond, args := tenantCond(d, "tenant", false)
	rows, err := tx.QueryContext(ctx, `SELECT tenant, id, time, rec, chain FROM answers_late WHERE time < ?`+cond,
		append([]any{d.before}, args...)...)
	if err != nil {
		return err
	}
	type answer struct {
		tenant string
		id     any
		t, seq int64
		rec    []byte
	}
	var as []answer
	for rows.Next() {
		var a answer
		if err := rows.Scan(&a.tenant, &a.id, &a.t, &a.rec, &a.seq); err != nil {
			rows.Close()
			return err
		}
		as = append(as, a)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, a := range as {
		if a.seq > 0 {
			pr.add(a.tenant, a.seq, idBytes(a.id), answerHash(a.id, a.tenant, a.t, a.rec))
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM answers_late WHERE tenant = ? AND id = ?`, a.tenant, a.id); err != nil {
			return err
		}
	}
	return nil
}
