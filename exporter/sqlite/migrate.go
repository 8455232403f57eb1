package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/mcpaudit/mcpaudit/audit"
)

// The pages the migrations copy calls in: a cancelled open stops between
// two (and interrupts a long statement), rolling the migration back.
// Variables for tests.
var (
	migratePage2to3 = 5000
	migratePage3to4 = 100000
)

// beginOpen begins a transaction of Open's that ctx may break off. Its
// statements take ctx (a long one is interrupted), but the transaction
// does not: database/sql rolls back a transaction whose own context ends
// on a goroutine of its own, and the caller's deferred Rollback then
// returns at once (ErrTxDone) while that rollback, and the close of the
// connection it gives back, are still under way. OpenContext returned with
// that connection open, and on a loaded machine it was still closing the
// file (an exclusive lock while it checkpoints the log) when the caller
// read the file: SQLITE_BUSY (flk50). Here the caller's Rollback does the
// rollback, before Open closes its connections.
func beginOpen(ctx context.Context, db *sql.DB) (*sql.Tx, error) {
	return db.BeginTx(context.WithoutCancel(ctx), nil)
}

// commitOpen commits a transaction begun by beginOpen unless ctx is done
// (as Commit does for a transaction begun with ctx).
func commitOpen(ctx context.Context, tx *sql.Tx) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return tx.Commit()
}

// migrate2to3 rewrites a store of schema 2, whose calls and writes were
// unique by call id alone, into schema 3, where they are unique by call id
// and tenant. Calls keep their row ids, so the document and session
// indexes stay valid; each call's tenant is read from its record. The
// write_hours rollup is dropped with its triggers and rebuilt from the
// writes when the store opens its investigation side. It runs in one
// transaction: a failure, or ctx cancelled, leaves the file at schema 2. p
// hears how many calls were copied.
func migrate2to3(ctx context.Context, db *sql.DB, p *progress) error {
	tx, err := beginOpen(ctx, db)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, stmt := range []string{
		`CREATE TABLE calls3 (
			rid    INTEGER PRIMARY KEY AUTOINCREMENT,
			id     ANY     NOT NULL,
			tenant INTEGER NOT NULL,
			time   INTEGER NOT NULL,
			rec    BLOB    NOT NULL,
			UNIQUE (id, tenant)
		) STRICT`,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("cannot migrate schema 2 to 3: %w", err)
		}
	}
	tenants := map[string]int64{}
	intern := func(v string) (int64, error) {
		if v == "" {
			return 0, nil
		}
		if id, ok := tenants[v]; ok {
			return id, nil
		}
		var id int64
		if err := tx.QueryRowContext(ctx, sqlIntern, v).Scan(&id); err != nil {
			return 0, err
		}
		tenants[v] = id
		return id, nil
	}
	ins, err := tx.PrepareContext(ctx, `INSERT INTO calls3 (rid, id, tenant, time, rec) VALUES (?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("cannot migrate schema 2 to 3: %w", err)
	}
	var buf []byte
	var done int64
	for last := int64(-1); ; {
		if err := ctx.Err(); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT rid, id, time, rec FROM calls WHERE rid > ? ORDER BY rid LIMIT ?`, last, migratePage2to3)
		if err != nil {
			return fmt.Errorf("cannot migrate schema 2 to 3: %w", err)
		}
		type row struct {
			rid, time int64
			id        any
			rec       []byte
		}
		var page []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.rid, &r.id, &r.time, &r.rec); err != nil {
				rows.Close()
				return fmt.Errorf("cannot migrate schema 2 to 3: %w", err)
			}
			page = append(page, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("cannot migrate schema 2 to 3: %w", err)
		}
		for _, r := range page {
			var rec audit.Record
			if buf, err = decodeCall(buf, r.id, r.time, r.rec, &rec); err != nil {
				return fmt.Errorf("cannot migrate schema 2 to 3: row %d: %w", r.rid, err)
			}
			tenant, err := intern(rec.Call.Tenant)
			if err != nil {
				return fmt.Errorf("cannot migrate schema 2 to 3: %w", err)
			}
			if _, err := ins.ExecContext(ctx, r.rid, r.id, tenant, r.time, r.rec); err != nil {
				return fmt.Errorf("cannot migrate schema 2 to 3: row %d: %w", r.rid, err)
			}
			last = r.rid
		}
		done += int64(len(page))
		p.step(done)
		if len(page) < migratePage2to3 {
			break
		}
	}
	for _, stmt := range []string{
		`DROP TABLE calls`, // and calls_time with it
		`ALTER TABLE calls3 RENAME TO calls`,
		`CREATE INDEX calls_time ON calls (time)`,
		`CREATE TABLE writes3 (
			time        INTEGER NOT NULL,
			call_id     ANY     NOT NULL,
			seq         INTEGER NOT NULL,
			state       INTEGER NOT NULL,
			server      INTEGER NOT NULL,
			tenant      INTEGER NOT NULL,
			tool        INTEGER NOT NULL,
			reason      INTEGER NOT NULL,
			action      INTEGER NOT NULL,
			session     TEXT    NOT NULL,
			document    TEXT    NOT NULL,
			key         TEXT    NOT NULL,
			state_after INTEGER,
			PRIMARY KEY (time, call_id, seq, tenant),
			UNIQUE (call_id, seq, tenant)
		) WITHOUT ROWID, STRICT`,
		`INSERT INTO writes3 SELECT time, call_id, seq, state, server, tenant, tool, reason, action,
			session, document, key, state_after FROM writes`,
		`DROP TABLE writes`, // its triggers and partial indexes go with it
		`ALTER TABLE writes3 RENAME TO writes`,
		`DROP TABLE IF EXISTS write_hours`,
		`ALTER TABLE findings ADD COLUMN chain INTEGER NOT NULL DEFAULT 0`,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("cannot migrate schema 2 to 3: %w", err)
		}
	}
	for _, stmt := range chainSchema {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("cannot migrate schema 2 to 3: %w", err)
		}
	}
	if err := adoptHistory(tx); err != nil {
		return fmt.Errorf("cannot migrate schema 2 to 3: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `PRAGMA user_version = 3`); err != nil {
		return fmt.Errorf("cannot migrate schema 2 to 3: %w", err)
	}
	return commitOpen(ctx, tx)
}

// migrate3to4 rewrites the calls table of a store of schema 3, whose
// constraint UNIQUE (id, tenant) SQLite cannot drop in place, into schema
// 4's (calls_key). Calls keep their row ids, which the chain, the document
// and the session indexes name, and the table keeps its highest rid given,
// so that rids of deleted calls are not given again. The id index is built
// when the store opens. It runs in one transaction: a failure, or ctx
// cancelled, leaves the file at schema 3. It copies the calls in pages of
// rids, so that p hears how many were copied.
func migrate3to4(ctx context.Context, db *sql.DB, p *progress) error {
	tx, err := beginOpen(ctx, db)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var seq int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'calls'), 0)`).Scan(&seq); err != nil {
		return fmt.Errorf("cannot migrate schema 3 to 4: %w", err)
	}
	for _, stmt := range []string{
		`CREATE TABLE calls4 (
			rid    INTEGER PRIMARY KEY AUTOINCREMENT,
			id     ANY     NOT NULL,
			tenant INTEGER NOT NULL,
			time   INTEGER NOT NULL,
			rec    BLOB    NOT NULL
		) STRICT`,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("cannot migrate schema 3 to 4: %w", err)
		}
	}
	page := migratePage3to4
	var done int64
	for last := int64(-1); ; {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO calls4 (rid, id, tenant, time, rec)
			SELECT rid, id, tenant, time, rec FROM calls WHERE rid > ? ORDER BY rid LIMIT ?`, last, page)
		if err != nil {
			return fmt.Errorf("cannot migrate schema 3 to 4: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("cannot migrate schema 3 to 4: %w", err)
		}
		done += n
		p.step(done)
		if n < int64(page) {
			break
		}
		if err := tx.QueryRowContext(ctx, `SELECT max(rid) FROM calls4`).Scan(&last); err != nil {
			return fmt.Errorf("cannot migrate schema 3 to 4: %w", err)
		}
	}
	if p != nil {
		p.log.Info("migrating the store: copied the calls, indexing them", "calls", done, "elapsed", p.elapsed())
	}
	// The sorts of the indexes and the commit (the WAL holds the whole
	// copy) count nothing.
	defer p.heartbeat("migrating the store: indexing the calls and committing")()
	for _, stmt := range []string{
		`DROP TABLE calls`, // and calls_time with it
		`ALTER TABLE calls4 RENAME TO calls`,
		`CREATE INDEX calls_time ON calls (time)`,
		callsKeyIndex,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("cannot migrate schema 3 to 4: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'calls'`, seq); err != nil {
		return fmt.Errorf("cannot migrate schema 3 to 4: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO sqlite_sequence (name, seq) SELECT 'calls', ? WHERE NOT EXISTS
		(SELECT 1 FROM sqlite_sequence WHERE name = 'calls')`, seq); err != nil {
		return fmt.Errorf("cannot migrate schema 3 to 4: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `PRAGMA user_version = 4`); err != nil {
		return fmt.Errorf("cannot migrate schema 3 to 4: %w", err)
	}
	return commitOpen(ctx, tx)
}

// migrate4to5 drops the document index of a store of schema 4
// (call_documents: the index beside the file holds it since schema 5),
// and rewrites writes without the constraint UNIQUE (call_id, seq, tenant),
// which SQLite cannot drop in place: writes are upserted by their primary
// key. The rows are copied as they are, so the write_hours rollup stays
// right: its triggers, which go with the old table, are created again (a
// file without the rollup gets it from the writes when the store opens its
// investigation side, as before). The index beside the file is rebuilt with
// the documents (its epoch is forgotten). It runs in one transaction: a
// failure, or ctx cancelled, leaves the file at schema 4.
func migrate4to5(ctx context.Context, db *sql.DB, p *progress) error {
	tx, err := beginOpen(ctx, db)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	defer p.heartbeat("migrating the store: copying the writes and committing")()
	for _, stmt := range []string{
		`DROP TABLE call_documents`,
		`CREATE TABLE writes5 (
			time        INTEGER NOT NULL,
			call_id     ANY     NOT NULL,
			seq         INTEGER NOT NULL,
			state       INTEGER NOT NULL,
			server      INTEGER NOT NULL,
			tenant      INTEGER NOT NULL,
			tool        INTEGER NOT NULL,
			reason      INTEGER NOT NULL,
			action      INTEGER NOT NULL,
			session     TEXT    NOT NULL,
			document    TEXT    NOT NULL,
			key         TEXT    NOT NULL,
			state_after INTEGER,
			PRIMARY KEY (time, call_id, seq, tenant)
		) WITHOUT ROWID, STRICT`,
		`INSERT INTO writes5 SELECT time, call_id, seq, state, server, tenant, tool, reason, action,
			session, document, key, state_after FROM writes ORDER BY time, call_id, seq, tenant`,
		`DROP TABLE writes`, // its triggers and partial indexes go with it
		`ALTER TABLE writes5 RENAME TO writes`,
		`DELETE FROM meta WHERE key IN ('` + idsEpochMeta + `', '` + idsEpochLegacy + `')`,
		`PRAGMA user_version = 5`,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("cannot migrate schema 4 to 5: %w", err)
		}
	}
	var rollup int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'write_hours'`).Scan(&rollup); err != nil {
		return fmt.Errorf("cannot migrate schema 4 to 5: %w", err)
	}
	if rollup > 0 {
		for _, stmt := range writeHoursTriggers {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("cannot migrate schema 4 to 5: %w", err)
			}
		}
	}
	return commitOpen(ctx, tx)
}

// migrate5to6 adds the table of the calls counted too late to be judged
// (too_late) to a store of schema 5. It copies nothing: calls stored too
// late before it are not named, and the replay after a restart judges them
// as it did before (the gate's read of the writes stored pending still
// covers a write they settle). One transaction: a failure, or ctx
// cancelled, leaves the file at schema 5.
func migrate5to6(ctx context.Context, db *sql.DB, p *progress) error {
	tx, err := beginOpen(ctx, db)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, stmt := range []string{tooLateTable, `PRAGMA user_version = 6`} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("cannot migrate schema 5 to 6: %w", err)
		}
	}
	return commitOpen(ctx, tx)
}
