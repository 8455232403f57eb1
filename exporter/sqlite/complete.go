package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
	"github.com/mcpaudit/mcpaudit/exporter/store"
)

// An exchange seen twice under one call id, first without its response (a
// client observer that timed out, one carrier of two) and then with it,
// is one call. The engine lets the answer complete the first observation
// only while that one waits for its watermark; an answer that comes after
// the call was judged is dropped, and the call judged without it. The
// store keeps one row per call id, and a restart's replay judges what it
// keeps, so it must keep the answer in the call's place exactly when the
// engine took it (review live16: it used to replace the row whenever the
// answer came, and a restart judged a write the live run had found
// unverified as durable, or left it pending for good).
//
// So AppendCallsAnswered keeps the answered copy of a stored unanswered
// call aside, in answers_late, before the append is acknowledged
// (keepAnswersStep: nothing acknowledged is lost), and a commit of the
// engine's output that names the call (audit.Results.Answered) puts it in
// the stored row's place in the same transaction (completeAnswers): the
// stored row is deleted and its hash kept with its chain entry in
// chain_pruned, as retention keeps a deleted row's, the answer's hash
// likewise with its answers entry, both records chained in pruned entries,
// and the answered copy is inserted as a new row, chained in a new entry. An answer no commit
// names stays aside, and `mcpaudit calls` shows the call unanswered: the
// engine dropped it (the call is read, replayed and judged without it, as
// the live run judged it), or the process died before the commit, and the
// restart's replay hands it to the engine again (AnswersAside: review
// rev18l's D3).

// answersLateTable keeps the answers of stored unanswered calls that no
// commit named as taken by the engine (yet): one per call id and tenant
// (the id hashes the call's millisecond, so no time is needed to find
// it), tenant not interned. Created when missing: stores of schema 6
// made before it lack it, and lose nothing by it. An answer kept aside was
// acknowledged to its sender: chain is the seq of the answers entry that
// chained it (review rev18l's D4: deleting one went unreported), added
// when missing (answersChainColumn).
const answersLateTable = `CREATE TABLE IF NOT EXISTS answers_late (
		tenant TEXT    NOT NULL,
		id     ANY     NOT NULL, -- packID
		time   INTEGER NOT NULL,
		rec    BLOB    NOT NULL,
		chain  INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (tenant, id)
	) WITHOUT ROWID, STRICT`

// answersLateTime serves the restart's read of the answers aside in the
// replay's range (AnswersAside) and retention's delete by time, which
// scanned the table. Created when missing, with the table.
const answersLateTime = `CREATE INDEX IF NOT EXISTS answers_late_time ON answers_late (time)`

// sqlStoredNearKey reads the stored call of an id and interned tenant
// through calls_key, a millisecond either side of ms: two observations of
// one call id may be dated a fraction of a millisecond apart, either side
// of a rounding edge.
const sqlStoredNearKey = `SELECT rid, id, time, rec FROM calls WHERE ` + callsKey + ` BETWEEN ? AND ? AND tenant = ? AND id = ?`

// sqlAnswerAside reads the answer kept aside for a call id and tenant.
const sqlAnswerAside = `SELECT time, rec FROM answers_late WHERE tenant = ? AND id = ?`

// answerRef names a call whose answer the engine took (Results.Answered).
type answerRef struct {
	tenant string
	id     any // packID(callPrefix, ...)
}

// keepAnswersStep keeps aside, in one transaction, the answers of stored
// unanswered calls (rows): the first kept of a call stays. It returns the
// indexes in rows of those that met another answer kept for their call
// (a concurrent request's) with another response: the caller reports them
// as differing, as it would had it read that answer first.
func (s *Store) keepAnswersStep(rows []callRow) (_ []int, err error) {
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, wrap(err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	var differ []int
	var buf []byte
	kept := map[string][]keptAnswer{}
	for i := range rows {
		r := &rows[i]
		res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO answers_late (tenant, id, time, rec) VALUES (?, ?, ?, ?)`,
			r.tenant, r.id, r.time, r.rec)
		if err != nil {
			return nil, wrap(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, wrap(err)
		} else if n == 1 {
			kept[r.tenant] = append(kept[r.tenant], keptAnswer{id: r.id, hash: answerHash(r.id, r.tenant, r.time, r.rec)})
			continue
		}
		var t int64
		var rec []byte
		if err := tx.QueryRowContext(ctx, sqlAnswerAside, r.tenant, r.id).Scan(&t, &rec); err != nil {
			return nil, wrap(err)
		}
		var kept, mine audit.Record
		if buf, err = decodeCall(buf, r.id, t, rec, &kept); err != nil {
			return nil, err
		}
		if buf, err = decodeCall(buf, r.id, r.time, r.rec, &mine); err != nil {
			return nil, err
		}
		a, aok := store.StoredResponse(kept.Call)
		b, bok := store.StoredResponse(mine.Call)
		if aok && bok && a != b {
			differ = append(differ, i)
		}
	}
	if err := chainAnswers(ctx, tx, kept, time.Now()); err != nil {
		return nil, wrap(err)
	}
	return differ, wrap(tx.Commit())
}

var _ audit.AnswerKeeper = (*Store)(nil)

// AnswersAside returns the answers kept aside (answers_late) whose calls
// are dated from since on: the replay after a restart hands the engine
// those of the calls whose judgement was never committed (review rev18l,
// D3). It reads only the rows in range, through answers_late_time.
func (s *Store) AnswersAside(ctx context.Context, since time.Time) ([]audit.Record, error) {
	if s.closed.Load() {
		return nil, errClosed("read the answers kept aside")
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, time, rec FROM answers_late WHERE time >= ?`, clampNanos(since))
	if err != nil {
		return nil, s.fail("read the answers kept aside", err)
	}
	defer rows.Close()
	var out []audit.Record
	for rows.Next() {
		var id any
		var t int64
		var blob []byte
		if err := rows.Scan(&id, &t, &blob); err != nil {
			return nil, s.fail("read the answers kept aside", err)
		}
		// Its own buffer: the record's texts may be views of it. Whole,
		// with its response, as the live run had it (a few rows).
		var rec audit.Record
		if _, err := decodeCall(nil, id, t, blob, &rec); err != nil {
			return nil, fmt.Errorf("cannot read the answer kept aside of call %s: %w", unpackID(callPrefix, id), err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("read the answers kept aside", err)
	}
	return out, nil
}

// answerAside reads the answer kept aside for the call of row, if any.
// A read that fails fails the append: the answer would otherwise be taken
// for the first and kept, or compared with nothing.
func (s *Store) answerAside(ctx context.Context, row *callRow) (_ *audit.Record, err error) {
	var t int64
	var blob []byte
	err = s.r.QueryRowContext(ctx, sqlAnswerAside, row.tenant, row.id).Scan(&t, &blob)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the answer kept aside of call %s: %w", unpackID(callPrefix, row.id), err)
	}
	var rec audit.Record
	if _, err := decodeCall(nil, row.id, t, blob, &rec); err != nil {
		return nil, fmt.Errorf("cannot read the answer kept aside of call %s: %w", unpackID(callPrefix, row.id), err)
	}
	return &rec, nil
}

// completeAnswers puts, in tx (a commit of the engine's output), the
// answer kept aside of each call of refs in the place of the stored row of
// its key, when that row still holds a call without a response; the answer
// then leaves answers_late. A call without an answer aside (the answer was
// stored first, or completed it already) is passed over. The new rows are
// added to chained, for their chain entries, and to stored, for the id
// index; last is the largest new rid (0: none).
func (s *Store) completeAnswers(ctx context.Context, tx *sql.Tx, refs []answerRef, chained map[string][]rowHash, stored []indexedCall) (_ []indexedCall, last int64, err error) {
	if s.opts.Calls == CallsLog {
		return stored, 0, s.completeLogged(ctx, tx, refs)
	}
	var buf []byte
	pr := pruning{}
	for _, ref := range refs {
		var t, aseq int64
		var blob []byte
		err := tx.QueryRowContext(ctx, `SELECT time, rec, chain FROM answers_late WHERE tenant = ? AND id = ?`, ref.tenant, ref.id).Scan(&t, &blob, &aseq)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, 0, wrap(err)
		}
		var ans audit.Record
		if buf, err = decodeCall(buf, ref.id, t, blob, &ans); err != nil {
			return nil, 0, err
		}
		rows, err := encodeCalls([]audit.Record{ans})
		if err != nil {
			return nil, 0, err
		}
		r := &rows[0]
		tenant, err := s.intern(tx, r.tenant)
		if err != nil {
			return nil, 0, wrap(err)
		}
		var rid, ot int64
		var id any
		var rec []byte
		ms := milliOf(r.time)
		err = tx.QueryRowContext(ctx, sqlStoredNearKey, ms-1, ms+1, tenant, r.id).Scan(&rid, &id, &ot, &rec)
		if errors.Is(err, sql.ErrNoRows) {
			continue // deleted since (retention); the answer goes with its time
		}
		if err != nil {
			return nil, 0, wrap(err)
		}
		var old audit.Record
		if buf, err = decodeCall(buf, id, ot, rec, &old); err != nil || old.Call.Responded {
			continue // answered already, or unreadable: left as it is, the answer aside
		}
		seq, err := entryOf(ctx, tx, r.tenant, chain.KindCalls, rid)
		if err != nil {
			return nil, 0, wrap(err)
		}
		if seq == 0 {
			continue // in no chain entry: deleting it would not be on record
		}
		pr.add(r.tenant, seq, rid, callHash(rid, id, r.tenant, ot, rec))
		if aseq > 0 {
			// The answer leaves answers_late on record, as the row it
			// replaces leaves its entry.
			pr.add(ref.tenant, aseq, idBytes(ref.id), answerHash(ref.id, ref.tenant, t, blob))
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM calls WHERE rid = ?`, rid); err != nil {
			return nil, 0, wrap(err)
		}
		res, err := tx.ExecContext(ctx, sqlInsertCall, r.id, tenant, r.time, r.rec)
		if err != nil {
			return nil, 0, wrap(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, 0, wrap(err)
		} else if n != 1 {
			return nil, 0, fmt.Errorf("cannot store the answer of call row %d in its place: its key is taken", rid)
		}
		newRID, err := res.LastInsertId()
		if err != nil {
			return nil, 0, wrap(err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM answers_late WHERE tenant = ? AND id = ?`, ref.tenant, ref.id); err != nil {
			return nil, 0, wrap(err)
		}
		if r.ok {
			if _, err := tx.ExecContext(ctx, sqlInsertSession, int64(r.session.sh), r.session.minute); err != nil {
				return nil, 0, wrap(err)
			}
		}
		chained[r.tenant] = append(chained[r.tenant], rowHash{row: newRID, hash: callHash(newRID, r.id, r.tenant, r.time, r.rec)})
		stored = append(stored, indexedCall{id: r.id, tenant: tenant, rid: newRID, time: r.time, docs: r.docs,
			session: r.session.sh, hasSession: r.ok})
		last = max(last, newRID)
	}
	if err := pr.store(ctx, tx, time.Now()); err != nil {
		return nil, 0, wrap(err)
	}
	return stored, last, nil
}

// keptAnswer is an answer a transaction kept aside: its id and hash.
type keptAnswer struct {
	id   any
	hash chain.Hash
}

// chainAnswers appends one answers entry per tenant for the answers a
// transaction kept aside (byTenant), and sets their chain column to it.
func chainAnswers(ctx context.Context, q queryer, byTenant map[string][]keptAnswer, now time.Time) error {
	for _, tenant := range sortedKeys(byTenant) {
		as := byTenant[tenant]
		rows := make([]rowHash, len(as))
		for i, a := range as {
			rows[i] = rowHash{id: idBytes(a.id), hash: a.hash}
		}
		seq, err := appendEntry(ctx, q, chain.Entry{Tenant: tenant, Kind: chain.KindAnswers, N: int64(len(rows)),
			Digest: findingsDigest(rows), Time: now})
		if err != nil {
			return fmt.Errorf("cannot chain the answers kept aside: %w", err)
		}
		for _, a := range as {
			if _, err := q.ExecContext(ctx, `UPDATE answers_late SET chain = ? WHERE tenant = ? AND id = ?`,
				seq, tenant, a.id); err != nil {
				return fmt.Errorf("cannot chain the answers kept aside: %w", err)
			}
		}
	}
	return nil
}
