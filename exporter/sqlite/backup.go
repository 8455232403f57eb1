package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

// BackupInfo describes a copy of a store file.
type BackupInfo struct {
	// Path is where the copy is.
	Path string
	// Schema is the copy's schema version.
	Schema int
	// Calls is how many calls the copy holds.
	Calls int64
	// Bytes is the copy's size.
	Bytes int64
	// Took is how long the copy and its check took.
	Took time.Duration
	// Oldest and Newest are the times of the earliest and the latest
	// call; zero when the copy holds none.
	Oldest, Newest time.Time
}

// Backup writes a consistent copy of the store file at path to out, which
// must not exist, while a collector may keep writing the file: SQLite's
// VACUUM INTO copies it from one read transaction (a snapshot of the last
// commit before it began, the write-ahead log included), compacted. The
// copy is written beside out under a temporary name, checked (SQLite's
// integrity check, its schema version and its calls counted), synced and
// only then renamed to out, readable by its owner only. The id index is
// not copied: it is derived, and rebuilt from the file where it is opened.
// A call log (ack "log") that no process holds is applied to the file
// first; one that serve holds is not copied (what serve has drained is).
func Backup(ctx context.Context, path, out string) (BackupInfo, error) {
	start := time.Now()
	info := BackupInfo{Path: out}
	if _, err := os.Stat(path); err != nil {
		return info, fmt.Errorf("cannot back up %s: %w", path, err)
	}
	if err := applyLog(path); err != nil {
		return info, fmt.Errorf("cannot back up %s: %w", path, err)
	}
	if _, err := os.Lstat(out); err == nil {
		return info, fmt.Errorf("cannot back up to %s: it exists; give a new file", out)
	} else if !errors.Is(err, os.ErrNotExist) {
		return info, fmt.Errorf("cannot back up to %s: %w", out, err)
	}
	// VACUUM INTO wants a file that does not exist or is empty: an empty
	// private file, so that the copy is never readable by others.
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*.tmp")
	if err != nil {
		return info, fmt.Errorf("cannot back up to %s: %w", out, err)
	}
	tmpPath := tmp.Name()
	tmp.Close()
	done := false
	defer func() {
		if !done {
			os.Remove(tmpPath)
		}
	}()
	if err := os.Chmod(tmpPath, datadir.FileMode); err != nil {
		return info, fmt.Errorf("cannot back up to %s: %w", out, err)
	}
	db, err := openReadOnly(path)
	if err != nil {
		return info, err
	}
	var version int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		db.Close()
		return info, fmt.Errorf("cannot back up %s: %w", path, err)
	}
	if version == 0 {
		db.Close()
		return info, fmt.Errorf("cannot back up %s: not a store (no schema)", path)
	}
	_, err = db.ExecContext(ctx, `VACUUM INTO ?`, tmpPath)
	db.Close()
	if err != nil {
		return info, fmt.Errorf("cannot back up %s: %w", path, err)
	}
	if info, err = checkCopy(ctx, tmpPath); err != nil {
		return info, fmt.Errorf("the copy of %s failed its check, not kept: %w", path, err)
	}
	info.Path = out
	if err := syncFile(tmpPath); err != nil {
		return info, fmt.Errorf("cannot back up to %s: %w", out, err)
	}
	// A link, not a rename: it fails if out appeared meanwhile.
	if err := os.Link(tmpPath, out); err != nil {
		return info, fmt.Errorf("cannot back up to %s: %w", out, err)
	}
	os.Remove(tmpPath)
	done = true
	if err := datadir.SyncDir(filepath.Dir(out)); err != nil {
		return info, fmt.Errorf("cannot back up to %s: %w", out, err)
	}
	info.Took = time.Since(start)
	return info, nil
}

// CheckCopy checks a copy of a store file, as Backup checks its own before
// it keeps it: SQLite's integrity check passes, it has a schema this build
// can open (equal or older: Open migrates it), and its calls can be
// counted. It only reads.
func CheckCopy(ctx context.Context, path string) (BackupInfo, error) {
	if _, err := os.Stat(path); err != nil {
		return BackupInfo{Path: path}, err
	}
	return checkCopy(ctx, path)
}

func checkCopy(ctx context.Context, path string) (BackupInfo, error) {
	info := BackupInfo{Path: path}
	db, err := openReadOnly(path)
	if err != nil {
		return info, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `PRAGMA integrity_check`)
	if err != nil {
		return info, fmt.Errorf("%s: %w", path, err)
	}
	var problems []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return info, fmt.Errorf("%s: %w", path, err)
		}
		if s != "ok" {
			problems = append(problems, s)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return info, fmt.Errorf("%s: %w", path, err)
	}
	if len(problems) > 0 {
		if len(problems) > 5 {
			problems = append(problems[:5], fmt.Sprintf("and %d more", len(problems)-5))
		}
		return info, fmt.Errorf("%s: integrity check: %s", path, strings.Join(problems, "; "))
	}
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&info.Schema); err != nil {
		return info, fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case info.Schema == 0:
		return info, fmt.Errorf("%s: not a store (no schema)", path)
	case info.Schema > schemaVersion:
		return info, fmt.Errorf("%s: schema version %d is newer than this build's %d", path, info.Schema, schemaVersion)
	}
	var lo, hi sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT count(*), min(time), max(time) FROM calls`).Scan(&info.Calls, &lo, &hi); err != nil {
		return info, fmt.Errorf("%s: %w", path, err)
	}
	if lo.Valid && hi.Valid {
		info.Oldest, info.Newest = time.Unix(0, lo.Int64).UTC(), time.Unix(0, hi.Int64).UTC()
	}
	st, err := os.Stat(path)
	if err != nil {
		return info, err
	}
	info.Bytes = st.Size()
	return info, nil
}

// CheckCallLogs checks the call logs log, opened to read alone, against
// the store file at path, as Open checks a store's call logs before it
// takes them: it returns a *LostBlocksError (ErrCallsLost) when blocks the
// file's chain_blocks records as synced are missing from log, and an
// error wrapping ErrCallsLost when it records blocks and log is nil (no
// call log). Neither file is written. mcpaudit restore checks a backup
// with it before it moves anything.
func CheckCallLogs(ctx context.Context, path string, log BlockLog) error {
	db, err := openReadOnly(path)
	if err != nil {
		return err
	}
	defer db.Close()
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'chain_blocks'`).Scan(&tables); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if tables == 0 {
		return nil // no call log was ever chained in it
	}
	if log == nil {
		var blocks, calls int64
		if err := db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(calls), 0) FROM chain_blocks`).Scan(&blocks, &calls); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if blocks > 0 {
			return fmt.Errorf("%w: %s records %d blocks (%d calls) of call logs, and there is no call log", ErrCallsLost, path, blocks, calls)
		}
		return nil
	}
	chained, err := lastChained(ctx, db)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	_, err = walkBlocks(ctx, db, log, chained, true)
	return err
}

// openReadOnly opens a store file for reading only, one connection.
func openReadOnly(path string) (*sql.DB, error) {
	q := url.Values{}
	q.Set("mode", "ro")
	q.Set("_busy_timeout", "10000")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("cannot open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
