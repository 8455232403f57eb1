package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
)

// An exchange seen twice under one call id, first without its response (a
// client observer that timed out, one carrier of two) and then with it,
// is one call: the engine lets the answer complete the first observation.
// The store keeps one row per call id, and would keep the first it took,
// the unanswered one, so a restart's replay would judge the call pending.
// AppendCallsCompared therefore hands the answered copies of stored
// unanswered calls (it reads the stored calls of the calls it skipped
// anyway) to completeStep, which puts each in the place of the stored row:
// the stored row is deleted and its hash kept with its chain entry in
// chain_pruned, as retention keeps a deleted row's, and the answered copy
// is inserted as a new row, chained in a new entry. Verify stays green,
// every reader still meets one row per call id, and the common path
// (new calls, plain re-sends) does not change.

// sqlStoredOfKey reads the stored call of a key (millisecond, interned
// tenant, packed id) through calls_key.
const sqlStoredOfKey = `SELECT rid, id, time, rec FROM calls WHERE ` + callsKey + ` = ? AND tenant = ? AND id = ?`

// completeStep runs, in one transaction, the completions of a request:
// each row replaces the stored row of its key when that row still holds
// a call without a response (a concurrent completion, or retention, may
// have replaced or deleted it since it was read). It returns how many
// were replaced.
func (s *Store) completeStep(rows []callRow) (_ int64, err error) {
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, wrap(err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
			clear(s.strs) // strings interned by the failed transaction
		}
	}()
	chained := map[string][]rowHash{}
	var stored []indexedCall
	var lastRID int64
	var buf []byte
	for i := range rows {
		r := &rows[i]
		tenant, err := s.intern(tx, r.tenant)
		if err != nil {
			return 0, wrap(err)
		}
		var rid, t int64
		var id any
		var rec []byte
		err = tx.QueryRowContext(ctx, sqlStoredOfKey, milliOf(r.time), tenant, r.id).Scan(&rid, &id, &t, &rec)
		if errors.Is(err, sql.ErrNoRows) {
			continue // deleted since (retention)
		}
		if err != nil {
			return 0, wrap(err)
		}
		var old audit.Record
		if buf, err = decodeCall(buf, id, t, rec, &old); err != nil || old.Call.Responded {
			continue // answered already (an earlier completion), or unreadable: left as it is
		}
		seq, err := entryOf(ctx, tx, r.tenant, chain.KindCalls, rid)
		if err != nil {
			return 0, wrap(err)
		}
		if seq == 0 {
			continue // in no chain entry: deleting it would not be on record
		}
		h := callHash(rid, id, r.tenant, t, rec)
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO chain_pruned (tenant, seq, row, hash) VALUES (?, ?, ?, ?)`,
			r.tenant, seq, rid, h[:]); err != nil {
			return 0, wrap(err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM calls WHERE rid = ?`, rid); err != nil {
			return 0, wrap(err)
		}
		res, err := tx.ExecContext(ctx, sqlInsertCall, r.id, tenant, r.time, r.rec)
		if err != nil {
			return 0, wrap(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return 0, wrap(err)
		} else if n != 1 {
			return 0, fmt.Errorf("cannot store the answer of call row %d in its place: its key is taken", rid)
		}
		newRID, err := res.LastInsertId()
		if err != nil {
			return 0, wrap(err)
		}
		if r.ok {
			if _, err := tx.ExecContext(ctx, sqlInsertSession, int64(r.session.sh), r.session.minute); err != nil {
				return 0, wrap(err)
			}
		}
		chained[r.tenant] = append(chained[r.tenant], rowHash{row: newRID, hash: callHash(newRID, r.id, r.tenant, r.time, r.rec)})
		stored = append(stored, indexedCall{id: r.id, tenant: tenant, rid: newRID, time: r.time, docs: r.docs,
			session: r.session.sh, hasSession: r.ok})
		lastRID = newRID
	}
	if len(stored) == 0 {
		return 0, wrap(tx.Commit())
	}
	if _, err := tx.ExecContext(ctx, sqlSetIndexed, lastRID); err != nil {
		return 0, wrap(err)
	}
	if err := chainCalls(ctx, tx, chained, time.Now()); err != nil {
		return 0, wrap(err)
	}
	if err := tx.Commit(); err != nil {
		return 0, wrap(err)
	}
	// The id key of each call now names its new row; the document and
	// session entries of the row it replaced are stale, which a read
	// skips (they name a row that is gone).
	s.ids.add(s.w, stored)
	return int64(len(stored)), nil
}
