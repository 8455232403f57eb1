package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/spool"
)

// Where the store keeps calls (Options.Calls).
const (
	// CallsSQLite keeps calls in the calls table of the SQLite file.
	CallsSQLite = "sqlite"
	// CallsLog keeps calls in Options.CallLog (the segmented call logs
	// of every tenant, exporter/sqlite/calllogs); everything else
	// (writes, findings, the lifecycle, the watermark, the answers kept
	// aside, the chain) stays in SQLite.
	CallsLog = "log"
	// CallsAuto chooses at Open, by what the data dir holds (chooseCalls):
	// "log" for a store with no call in its calls table, "sqlite" for one
	// whose table holds calls or with Ack "log".
	CallsAuto = "auto"
)

// Open's refusals of a place for calls:
var (
	// ErrCallsInTable is returned by Open with Calls "log" when the calls
	// table holds calls: the store does not read two sources of calls, so
	// the switch waits until retention (with Calls "sqlite") has emptied
	// it, or mcpaudit migrate-calls has moved them into the call log.
	ErrCallsInTable = errors.New("the calls table holds calls")
	// ErrCallsInBoth is returned by Open with Calls "auto" when both the
	// calls table and the call log hold calls: it cannot tell which one is
	// the store's, and reads one source only.
	ErrCallsInBoth = errors.New("both the calls table and the call logs hold calls")
	// ErrCallsLost is returned by Open with the calls in call logs when
	// blocks the chain records as synced (acknowledged calls) are not in
	// the logs on disk, and not retention's: a live segment cut short or
	// removed, a segment file gone. The error (*LostBlocksError) names
	// the tenant, the segment file, the blocks and the calls.
	ErrCallsLost = errors.New("acknowledged calls are missing from the call logs")
)

// ackLogHolds reports whether the call log of Ack "log" in dir holds a
// segment that is not empty: calls that Open applies to the calls table
// (a drained segment is removed).
func ackLogHolds(dir string) bool {
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+spool.SegExt))
	for _, seg := range segs {
		if fi, err := os.Stat(seg); err == nil && fi.Size() > 0 {
			return true
		}
	}
	return false
}

// chooseCalls is Open's choice with Calls "auto", made before the store
// takes its first request, once the file is migrated: where the calls are
// kept (CallsLog or CallsSQLite) and why, in words for the log. n is the
// count of the calls table. An error wraps ErrCallsInBoth, or is the call
// log's.
func chooseCalls(ctx context.Context, path string, opts Options, n int64) (calls, reason string, err error) {
	var newest time.Time
	if opts.CallLog != nil {
		if newest, err = opts.CallLog.Newest(ctx); err != nil {
			return "", "", fmt.Errorf("cannot tell where the calls are kept (calls: auto): %w", err)
		}
	}
	ackLog := ackLogHolds(LogDir(path))
	switch {
	case n > 0 && !newest.IsZero():
		return "", "", fmt.Errorf("calls: auto: %w: the calls table holds %d, the call logs hold calls up to %s; "+
			"move the table's into the logs (mcpaudit migrate-calls), or set calls: sqlite (the logs' calls are then not read) "+
			"or calls: log (refused while the table holds calls)", ErrCallsInBoth, n, newest.UTC().Format(time.RFC3339Nano))
	case !newest.IsZero():
		if opts.Ack == AckLog {
			return "", "", fmt.Errorf("calls: auto: the call logs hold calls (up to %s) and ack: log keeps calls in the calls table; "+
				"set ack: commit to read them", newest.UTC().Format(time.RFC3339Nano))
		}
		return CallsLog, "the call logs hold calls", nil
	case n > 0:
		return CallsSQLite, fmt.Sprintf("the calls table holds %d calls (mcpaudit migrate-calls moves them into call logs)", n), nil
	case opts.Ack == AckLog:
		return CallsSQLite, "ack: log keeps calls in the calls table", nil
	case ackLog:
		return CallsSQLite, "the call log of ack: log (" + filepath.Base(LogDir(path)) + ") holds calls not yet applied, which go to the calls table", nil
	case opts.CallLog == nil:
		return CallsSQLite, "no call log was given", nil
	}
	return CallsLog, "no call is stored yet", nil
}

// CallLog holds the calls of every tenant in place of the calls table
// (Calls "log"). It is an interface here because its implementation
// (exporter/sqlite/calllogs, over internal/calllog) imports this package
// for the calls' encoding. Every method is safe for concurrent use.
type CallLog interface {
	// Append stores recs durably and returns, in order, the indexes of
	// the calls it held back: their id was stored for their tenant, or
	// an earlier call of recs took it. On an error none is acknowledged.
	Append(ctx context.Context, recs []audit.Record) (held []int, err error)
	// Get returns the stored calls of id, one per tenant that holds it.
	// With at set (the call's time, known to the caller) it may look only
	// where a call of at's millisecond is kept, and miss a call of id
	// stored at another time; with at zero it looks everywhere.
	Get(ctx context.Context, id string, at time.Time) ([]audit.Record, error)
	// Scan calls fn with every stored call of every tenant whose Time is
	// in [from, to) (to zero: no end) in time order; with doc or session
	// set, only the calls on that document or of that session.
	Scan(ctx context.Context, q CallScan, fn func(*audit.Record) error) error
	// DeleteBefore removes calls before t of every tenant but keep (or of
	// tenant only, with only set); calls may stay until their segment is
	// wholly before t. It returns how many went.
	DeleteBefore(t time.Time, tenant string, only bool, keep []string) (int64, error)
	// Newest returns the time of the latest stored call (zero: none).
	Newest(ctx context.Context) (time.Time, error)
	// Close releases the logs; the store closes its CallLog.
	Close() error
}

// CallScan selects the calls of a CallLog.Scan.
type CallScan struct {
	From, To          time.Time
	Document, Session string
}

// errStopScan ends a scan of the call log early.
var errStopScan = errors.New("stop")

// logRows reads from the call log the calls of q (a document's or a
// session's, or all) that sp holds and keep takes (nil: all), in (time,
// rid) order, where rid is a call's place, from 1, among the calls of its
// time ordered by id: the log has no row ids, and this order is the same
// at every read while no call of that time is added. It stops once more
// than max rows are read and the time moves on (max 0: no bound) and
// reports done when it read to the end.
func (s *Store) logRows(ctx context.Context, q CallScan, sp *docSpan, keep func(*audit.Record) bool, max int) (rows []storedCall, done bool, err error) {
	q.From = fromNanos(sp.time)
	if !sp.unbounded {
		q.To = fromNanos(sp.until)
	}
	var group []*audit.Record
	flush := func() {
		slices.SortFunc(group, func(a, b *audit.Record) int { return cmp.Compare(a.Call.ID, b.Call.ID) })
		for i, r := range group {
			t, _ := nanos(r.Call.Time)
			rid := int64(i + 1)
			if !sp.holds(t, rid) || keep != nil && !keep(r) {
				continue
			}
			blob := append([]byte{codecRaw}, appendRecord(nil, r)...)
			rows = append(rows, storedCall{rid: rid, time: t, id: packID(callPrefix, r.Call.ID), blob: blob})
		}
		group = group[:0]
	}
	err = s.opts.CallLog.Scan(ctx, q, func(r *audit.Record) error {
		if len(group) > 0 && !r.Call.Time.Equal(group[0].Call.Time) {
			flush()
			if max > 0 && len(rows) > max {
				return errStopScan
			}
		}
		group = append(group, r)
		return nil
	})
	if errors.Is(err, errStopScan) {
		return rows, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	flush()
	return rows, true, nil
}

// logBatch is docBatch from the call log: the next batch of the span's
// calls (of document or session), moving sp past them.
func (s *Store) logBatch(ctx context.Context, q CallScan, sp *docSpan, batch int) ([]storedCall, bool, error) {
	rows, done, err := s.logRows(ctx, q, sp, nil, batch)
	if err != nil || done || len(rows) == 0 {
		return rows, true, err
	}
	last := rows[len(rows)-1]
	sp.time, sp.rid = last.time, last.rid
	return rows, false, nil
}

// readStoredLog is readStored from the call log: take is given the
// stored calls of keys, each looked up by id at its millisecond, each blob
// the record uncompressed.
func (s *Store) readStoredLog(ctx context.Context, keys []callKey, blobs bool, take func(id any, tenant string, t int64, blob []byte)) error {
	type idAt struct {
		id string
		ms int64
	}
	seen := make(map[idAt]bool, len(keys))
	for _, k := range keys {
		if seen[idAt{k.id, k.ms}] {
			continue // another tenant's call of the id: Get returns both
		}
		seen[idAt{k.id, k.ms}] = true
		recs, err := s.opts.CallLog.Get(ctx, unpackID(callPrefix, packedOf(k.id)), time.UnixMilli(k.ms))
		if err != nil {
			return err
		}
		for i := range recs {
			t, _ := nanos(recs[i].Call.Time)
			var blob []byte
			if blobs {
				blob = append([]byte{codecRaw}, appendRecord(nil, &recs[i])...)
			}
			take(packID(callPrefix, recs[i].Call.ID), recs[i].Call.Tenant, t, blob)
		}
	}
	return nil
}

// appendLog is appendCalls with Calls "log": the calls go to the call log
// alone (no row of them in SQLite). held is the indexes of the calls the
// log held back.
func (s *Store) appendCallLog(ctx context.Context, calls []audit.Record) (int, []int, error) {
	if s.closed.Load() {
		return 0, nil, errClosed("append calls")
	}
	held, err := s.opts.CallLog.Append(ctx, calls)
	if err != nil {
		return 0, nil, fmt.Errorf("cannot append calls: %w", err)
	}
	return len(calls) - len(held), held, nil
}

// appendLogged is appendCalls with Calls "log". The rows returned are
// encoded for the held calls alone (at their indexes; the others are
// zero): the comparison and the answers kept aside read only those.
func (s *Store) appendLogged(ctx context.Context, calls []audit.Record, compare bool) (int, []callRow, []int, error) {
	for i := range calls {
		r := &calls[i]
		if r.Call == nil {
			return 0, nil, nil, fmt.Errorf("cannot append calls: call record %d has no call", i)
		}
		if r.Call.ID == "" {
			return 0, nil, nil, fmt.Errorf("cannot append calls: call record %d has no id", i)
		}
		if _, ok := nanos(r.Call.Time); !ok {
			return 0, nil, nil, fmt.Errorf("cannot append calls: call %s: time %s is out of range", r.Call.ID, r.Call.Time)
		}
	}
	if len(calls) == 0 {
		if s.closed.Load() {
			return 0, nil, nil, errClosed("append calls")
		}
		return 0, nil, nil, nil
	}
	n, held, err := s.appendCallLog(ctx, calls)
	if err != nil {
		return 0, nil, nil, s.fail("append calls", err)
	}
	if !compare || len(held) == 0 {
		return n, nil, nil, nil
	}
	sub := make([]audit.Record, len(held))
	for j, i := range held {
		sub[j] = calls[i]
	}
	enc, err := encodeCalls(sub)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("cannot append calls: %w", err)
	}
	rows := make([]callRow, len(calls))
	for j, i := range held {
		rows[i] = enc[j]
	}
	return n, rows, held, nil
}

// scanLogged is ScanCalls from the call log.
func (s *Store) scanLogged(ctx context.Context, since time.Time, fn func(*audit.Record) error) error {
	var fnErr error
	err := s.opts.CallLog.Scan(ctx, CallScan{From: since}, func(r *audit.Record) error {
		if err := fn(r); err != nil {
			fnErr = err
			return errStopScan
		}
		return nil
	})
	if fnErr != nil {
		return fnErr // as is
	}
	if err != nil {
		return s.fail("scan calls", err)
	}
	return nil
}

// An answer that arrives after its call (kept aside in answers_late until
// the engine takes it, complete.go) cannot take the logged call's place:
// the log is written once. With Calls "log" the answer taken is kept in
// calls_completed, and every call read from the log (Get, Scan) whose key
// has one comes back as the answer, as the replaced row does in the calls
// table. The answer stays in answers_late too (leaving it would prune a
// chain entry; the replay hands it to the engine again, which finds the
// call answered). calls_completed holds a row per answered-late call;
// retention does not delete them yet (the call, cut from the log, is no
// longer read, so its row is never shown).

const sqlCreateCompleted = `CREATE TABLE IF NOT EXISTS calls_completed (
	tenant TEXT NOT NULL, id NOT NULL, time INTEGER NOT NULL, rec BLOB NOT NULL,
	PRIMARY KEY (tenant, id)) WITHOUT ROWID`

// completedKey names a call of a tenant.
type completedKey struct{ tenant, id string }

// completedCalls is the answers of calls_completed, in memory, and those
// of the commit under way (the committer's alone) until it ends.
type completedCalls struct {
	mu      sync.RWMutex
	m       map[completedKey]*audit.Record
	pending map[completedKey]*audit.Record
}

// of returns the answer that completed r's call, or r.
func (c *completedCalls) of(r *audit.Record) *audit.Record {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if a, ok := c.m[completedKey{r.Call.Tenant, r.Call.ID}]; ok {
		return a
	}
	return r
}

// settle makes the pending answers visible once their commit succeeded,
// or drops them.
func (c *completedCalls) settle(ok bool) {
	if len(c.pending) == 0 {
		return
	}
	if ok {
		c.mu.Lock()
		if c.m == nil {
			c.m = map[completedKey]*audit.Record{}
		}
		maps.Copy(c.m, c.pending)
		c.mu.Unlock()
	}
	clear(c.pending)
}

// loadCompleted creates calls_completed when missing, reads it into
// s.completed and puts the completing layer over the call log.
func (s *Store) loadCompleted(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, sqlCreateCompleted); err != nil {
		return fmt.Errorf("cannot create calls_completed: %w", wrap(err))
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, time, rec FROM calls_completed`)
	if err != nil {
		return fmt.Errorf("cannot read calls_completed: %w", err)
	}
	defer rows.Close()
	m := map[completedKey]*audit.Record{}
	for rows.Next() {
		var id any
		var t int64
		var blob []byte
		if err := rows.Scan(&id, &t, &blob); err != nil {
			return fmt.Errorf("cannot read calls_completed: %w", err)
		}
		rec := &audit.Record{}
		if _, err := decodeCall(nil, id, t, blob, rec); err != nil {
			return fmt.Errorf("cannot read calls_completed: %w", err)
		}
		m[completedKey{rec.Call.Tenant, rec.Call.ID}] = rec
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read calls_completed: %w", err)
	}
	s.completed.m = m
	s.opts.CallLog = &completingLog{CallLog: s.opts.CallLog, c: &s.completed}
	return nil
}

// completeLogged is completeAnswers with Calls "log": in tx, each call of
// refs with an answer kept aside whose logged call (as read, completed
// or not) has no response is completed by it (calls_completed).
func (s *Store) completeLogged(ctx context.Context, tx *sql.Tx, refs []answerRef) error {
	for _, ref := range refs {
		var t int64
		var blob []byte
		err := tx.QueryRowContext(ctx, `SELECT time, rec FROM answers_late WHERE tenant = ? AND id = ?`, ref.tenant, ref.id).Scan(&t, &blob)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return wrap(err)
		}
		ans := &audit.Record{}
		if _, err := decodeCall(nil, ref.id, t, blob, ans); err != nil {
			return err
		}
		key := completedKey{ans.Call.Tenant, ans.Call.ID}
		if _, ok := s.completed.pending[key]; ok {
			continue
		}
		recs, err := s.opts.CallLog.Get(ctx, ans.Call.ID, ans.Call.Time) // an answer carries its call's time
		if err != nil {
			return err
		}
		var old *audit.Record
		for i := range recs {
			if recs[i].Call.Tenant == ans.Call.Tenant {
				old = &recs[i]
			}
		}
		if old == nil || old.Call.Responded {
			continue // deleted since (retention), or answered already
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO calls_completed (tenant, id, time, rec) VALUES (?, ?, ?, ?)`,
			ans.Call.Tenant, ref.id, t, blob); err != nil {
			return wrap(err)
		}
		if s.completed.pending == nil {
			s.completed.pending = map[completedKey]*audit.Record{}
		}
		s.completed.pending[key] = ans
	}
	return nil
}

// completingLog is the store's CallLog with the answers of
// calls_completed in their calls' place.
type completingLog struct {
	CallLog
	c *completedCalls
}

func (l *completingLog) Get(ctx context.Context, id string, at time.Time) ([]audit.Record, error) {
	recs, err := l.CallLog.Get(ctx, id, at)
	for i := range recs {
		recs[i] = *l.c.of(&recs[i])
	}
	return recs, err
}

func (l *completingLog) Scan(ctx context.Context, q CallScan, fn func(*audit.Record) error) error {
	return l.CallLog.Scan(ctx, q, func(r *audit.Record) error { return fn(l.c.of(r)) })
}
