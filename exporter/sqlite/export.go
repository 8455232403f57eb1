package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"

	"github.com/mcpaudit/mcpaudit/audit"
)

// ReadCalls calls fn with every call of the store file at path that q
// selects (its Tenant, Server, Session, Since and Until; the other fields
// are not read), with its stored reading, in time order and, within one
// instant, in the order the calls were stored: the order ScanCalls and
// Calls give.
//
// It reads from one read transaction, a snapshot of the last commit before
// it, while a collector may keep writing the file (as Backup does): it
// opens the file read-only, takes neither the id index nor the call log,
// and writes nothing, so that serve starting meanwhile is not held up. A
// call log (ack "log") that no process holds is applied to the file first,
// as Backup and Verify apply it; one that serve holds is not read (what
// serve has drained is). Memory holds one call at a time; a long read
// keeps SQLite's write-ahead log from being checkpointed past its
// snapshot until it ends. The file must have this build's schema.
func ReadCalls(ctx context.Context, path string, q audit.CallQuery, fn func(*audit.Record) error) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("cannot read calls of %s: %w", path, err)
	}
	if err := applyLog(path); err != nil {
		return fmt.Errorf("cannot read calls of %s: %w", path, err)
	}
	db, err := openReadOnly(path)
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("cannot read calls of %s: %w", path, err)
	}
	defer tx.Rollback()
	var version int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return fmt.Errorf("cannot read calls of %s: %w", path, err)
	}
	switch {
	case version == 0:
		return fmt.Errorf("cannot read calls of %s: not a store (no schema)", path)
	case version != schemaVersion:
		return fmt.Errorf("cannot read calls of %s: schema version %d, want %d (open it with serve once to migrate it)", path, version, schemaVersion)
	}
	since, until := clampNanos(q.Since), int64(1<<63-1)
	if !q.Until.IsZero() {
		until = clampNanos(q.Until)
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, time, rec FROM calls WHERE time >= ? AND time < ? ORDER BY time, rid`, since, until)
	if err != nil {
		return fmt.Errorf("cannot read calls of %s: %w", path, err)
	}
	defer rows.Close()
	var buf []byte
	for rows.Next() {
		var t int64
		var id any
		// Valid until the next row: the record is decoded from it
		// (readCall copies what it keeps) before then.
		var blob sql.RawBytes
		if err := rows.Scan(&id, &t, &blob); err != nil {
			return fmt.Errorf("cannot read calls of %s: %w", path, err)
		}
		raw, err := decompress(buf, blob)
		if err != nil {
			return fmt.Errorf("cannot read calls of %s: call %s: %w", path, unpackID(callPrefix, id), err)
		}
		if len(blob) > 0 && blob[0] != codecRaw {
			buf = raw[:0] // the decompressor's, not the driver's
		}
		if server, session, tenant, ok := recordHead(raw); ok && (q.Server != "" && string(server) != q.Server ||
			q.Session != "" && string(session) != q.Session || q.Tenant != "" && string(tenant) != q.Tenant) {
			continue
		}
		var rec audit.Record
		if err := readCall(raw, id, t, &rec); err != nil {
			return fmt.Errorf("cannot read calls of %s: %w", path, err)
		}
		if err := fn(&rec); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return fmt.Errorf("cannot read calls of %s: %w", path, err)
	}
	return nil
}
