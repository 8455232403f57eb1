package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
	"github.com/mcpaudit/mcpaudit/internal/conf"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

const backupUsage = `usage: mcpaudit backup --data-dir DIR --out FILE

Writes a consistent copy of the embedded store of DIR to FILE, which must
not exist, while a collector keeps running on DIR: one read transaction
copies the last commit before it (SQLite's VACUUM INTO, compacted), the copy
is checked (integrity, schema, calls counted) and synced before it takes its
name. Before the store, what serve resumes from is copied into FILE.state/
(which must not exist either): the state file partitions.json with the
journal of its counters, the notify journal, and with serve.sqlite.ack: log
the call log's calls acknowledged and not yet committed; a serve restored
from the backup goes on from them as after a crash at the time of the
backup (its counters from the values saved, no finding notified twice).
The id index is not copied: it is rebuilt where the copy is restored
(mcpaudit restore); nor is redact.key (keep it with the collector, as the
signing key: docs/storage.md, "Backup and restore"). With serve.sqlite.calls: log the
calls are in call logs: they are copied after the store into FILE.calls/
(which must not exist either), opened read-only beside serve, every call
synced before that open (so every call acknowledged before the backup
began) copied. The ClickHouse store is backed up with ClickHouse's own
tools.

flags:
`

// backupCommand implements mcpaudit backup.
func backupCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, backupUsage); fs.PrintDefaults() }
	dir := fs.String("data-dir", "", "the data dir of the embedded store")
	out := fs.String("out", "", "the file to write; it must not exist")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if *dir == "" || *out == "" {
		return &exitError{code: 2, err: errors.New("--data-dir and --out are required")}
	}
	logged := calllogs.InUse(*dir)
	// The copies that go beside FILE must not exist either, checked
	// before anything is copied.
	beside := []string{*out, stateCopy(*out)}
	if logged {
		beside = append(beside, callsCopy(*out))
	}
	for _, p := range beside {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			return &exitError{code: 1, err: fmt.Errorf("cannot back up into %s: it exists", p)}
		}
	}
	if _, err := os.Lstat(filepath.Join(*dir, storeFile)); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("cannot back up %s: %w", *dir, err)}
	}
	// Before the store: what the state file's marks cover was committed
	// before it was written, and every call of the call log (ack "log")
	// not in the copy of its segments was committed before the store's
	// copy begins.
	start := time.Now()
	st, err := backupState(*dir, stateCopy(*out))
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	info, err := sqlite.Backup(ctx, filepath.Join(*dir, storeFile), *out)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("%w (%s is written)", err, stateCopy(*out))}
	}
	fmt.Fprintf(stdout, "wrote %s: %s, in %s\n", stateCopy(*out), st, time.Since(start).Round(time.Millisecond))
	if st.Counters != nil {
		fmt.Fprintf(stdout, "warning: %v: a serve restored from it starts its findings, calls and write states counters at 0 (Prometheus reads a reset), as the collector backed up would at its next start\n", st.Counters)
	}
	if !logged {
		fmt.Fprintf(stdout, "wrote %s: %d calls, schema %d, %s, in %s\n", info.Path, info.Calls, info.Schema,
			formatBytes(info.Bytes), info.Took.Round(time.Millisecond))
	} else {
		// The calls are in the call logs, copied next: the table's count
		// alone ("0 calls") read as an empty backup (adv52).
		fmt.Fprintf(stdout, "wrote %s: the store, %d calls in its calls table (the call logs' follow), schema %d, %s, in %s\n", info.Path, info.Calls, info.Schema,
			formatBytes(info.Bytes), info.Took.Round(time.Millisecond))
	}
	if logged {
		// After the store: every call its rows speak of was acknowledged,
		// so synced in its log, before the logs are opened here.
		start := time.Now()
		n, err := snapshotLogs(calllogs.Dir(*dir), callsCopy(*out))
		if err != nil {
			return &exitError{code: 1, err: fmt.Errorf("%w (the store's copy %s is written; the call logs' is not)", err, *out)}
		}
		fmt.Fprintf(stdout, "wrote %s: %d calls of the call logs, in %s (restore takes both)\n", callsCopy(*out), n, time.Since(start).Round(time.Millisecond))
		fmt.Fprintf(stdout, "backup %s holds %d calls (%d in the call logs, %d in the store's calls table)\n", *out, n+info.Calls, n, info.Calls)
	}
	return nil
}

// callsCopy is where backup copies the call logs (serve.sqlite.calls: log)
// of the backup written to file, and restore finds them.
func callsCopy(file string) string { return file + ".calls" }

// snapshotLogs copies the call logs of src, opened read-only beside a
// running serve, into dst (calllogs.Logs.Snapshot): every call synced
// before the open.
func snapshotLogs(src, dst string) (int64, error) {
	logs, err := calllogs.Open(src, calllog.Options{ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer logs.Close()
	return logs.Snapshot(dst)
}

const restoreUsage = `usage: mcpaudit restore --data-dir DIR --from FILE

Makes FILE, a copy written by mcpaudit backup, the embedded store of DIR.
The collector must be stopped: restore takes the data dir's lock. FILE is
checked first (integrity, schema, and the blocks of call logs its store
records against FILE.calls/, as serve's open checks them: a backup whose
call logs lack some is refused, exit 1, DIR left as it was); then the files it replaces (the store
file and its write-ahead log, the id index, the state file partitions.json,
the call logs calls/) are moved, not deleted, into DIR/before-restore-TIME/,
and FILE is copied in, with the call logs of FILE.calls/ when backup wrote
it (their blocks checked as they are read), and the files of FILE.state/
(the state file, its counters' journal, the notify journal, which is then
moved aside too, and the call log of ack "log") when backup wrote it. At its
next start serve rebuilds the id index and goes on from the backup's state
file, as after a crash at the time of the backup: its counters go on from
the values saved and it judges again only the calls after its marks.
From a backup without FILE.state/ (written before debt52) serve judges
every stored call again, so that the findings and write states are those of
the restored calls (this takes longer than a normal start), and its
counters start at 0. Calls acknowledged after the backup are not in it: have their
senders post them again (a call already stored is not stored twice).
serve's retention counts back from the newest stored call (by default,
serve.retention_from): an old backup is kept until newer calls are
stored; raise serve.retention above the age of the restored calls
(restore prints their span) to keep it beside live traffic.
redact.key stays: restoring into a new data dir, copy it in from the old
one (restore warns when it is missing).

flags:
`

// restoreCommand implements mcpaudit restore.
func restoreCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, restoreUsage); fs.PrintDefaults() }
	dir := fs.String("data-dir", "", "the data dir to restore into")
	from := fs.String("from", "", "the copy written by mcpaudit backup")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if *dir == "" || *from == "" {
		return &exitError{code: 2, err: errors.New("--data-dir and --from are required")}
	}
	info, err := sqlite.CheckCopy(ctx, *from)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("not restored: %w", err)}
	}
	_, err = os.Stat(callsCopy(*from))
	logged := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return &exitError{code: 1, err: fmt.Errorf("not restored: %w", err)}
	}
	// Before anything is moved: a backup whose call logs lack blocks its
	// store records would be refused by serve's next start (adv52).
	if err := checkBackupLogs(ctx, *from, logged); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("not restored, %s is left as it was (nothing moved or copied): %w", *dir, err)}
	}
	d, err := datadir.Open(*dir)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("not restored: %w", err)}
	}
	defer d.Close()
	replaces := restoreReplaces
	_, err = os.Stat(stateCopy(*from))
	withState := err == nil
	if withState {
		// The backup's notify journal replaces the data dir's: it
		// speaks of the findings of the restored store.
		replaces = append(slices.Clone(replaces), notifyJournal)
	}
	aside, moved, err := moveAside(*dir, replaces)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	if err := copyInto(*from, filepath.Join(*dir, storeFile)); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("%w (the files it was to replace are in %s)", err, aside)}
	}
	if withState {
		if err := restoreState(stateCopy(*from), *dir); err != nil {
			return &exitError{code: 1, err: fmt.Errorf("the store is restored, its state not: %w (the files replaced are in %s)", err, aside)}
		}
		fmt.Fprintf(stdout, "restored %s into %s\n", stateCopy(*from), *dir)
	}
	var logCalls int64
	if logged {
		// The call logs' copy, checked by its read-only open (each live
		// segment's blocks, each index's checksum), copied in whole.
		logCalls, err = snapshotLogs(callsCopy(*from), calllogs.Dir(*dir))
		if err != nil {
			return &exitError{code: 1, err: fmt.Errorf("the store is restored, its call logs not: %w (the files replaced are in %s)", err, aside)}
		}
		fmt.Fprintf(stdout, "restored %s into %s\n", callsCopy(*from), calllogs.Dir(*dir))
	}
	if len(moved) > 0 {
		fmt.Fprintf(stdout, "moved %v to %s\n", moved, aside)
	}
	next := "At its next start serve rebuilds the id index and judges every stored call again."
	if _, err := os.Stat(filepath.Join(*dir, stateFile)); err == nil {
		next = "At its next start serve rebuilds the id index and goes on from the backup's state file, as after a crash at the time of the backup: " +
			"its counters from the values saved, judging again only the calls after its marks."
	}
	// One total: with call logs the store's calls table holds none, or
	// those not moved into the logs yet (adv52: "0 calls" read as an
	// empty backup).
	calls := fmt.Sprintf("%d calls", info.Calls)
	if logged {
		calls = fmt.Sprintf("%d calls (%d calls of the call logs, in %s; %d in the store's calls table)",
			info.Calls+logCalls, logCalls, calllogs.Dir(*dir), info.Calls)
	}
	fmt.Fprintf(stdout, "restored %s into %s: %s, schema %d. %s\n", *from, *dir, calls, info.Schema, next)
	if !info.Oldest.IsZero() {
		fmt.Fprintf(stdout, "its calls run from %s to %s\n", info.Oldest.Format(time.RFC3339), info.Newest.Format(time.RFC3339))
		// serve's retention counts back from the newest stored call by
		// default: a backup older than the retention, restored to be
		// looked into, is kept until newer calls come, and then deleted.
		if ret := time.Duration(NewDefaultConfig().Serve.Retention); time.Since(info.Oldest) > ret {
			age := time.Since(info.Oldest)
			when := "once newer calls are stored (live traffic), or at its start with serve.retention_from: now"
			if info.Newest.Sub(info.Oldest) > ret {
				when = "at its start (they span more than that before the newest), and more once newer calls are stored"
			}
			fmt.Fprintf(stdout, "warning: calls go back %d days, past the default serve.retention (%s): serve deletes calls, writes and findings older "+
				"than serve.retention (and serve.tenant_retention) before the newest stored call %s; raise it above that age before starting serve on %s to keep them\n",
				int(age.Hours()/24), conf.FormatDuration(ret), when, *dir)
		}
	}
	if _, err := os.Stat(filepath.Join(*dir, "redact.key")); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(stdout, "warning: %s has no redact.key: copy in the one of the collector that wrote the backup (unless redact.secret_file names it), "+
			"or serve creates a new key, and a secret masked from then on gets another mask than in the restored calls (docs/security.md)\n", *dir)
	}
	return nil
}

// checkBackupLogs checks the backup at from as serve's open checks a data
// dir's call logs (sqlite.CheckCallLogs): the blocks its store records as
// synced must all be in its call logs' copy, FILE.calls/ (logged: it
// exists), opened to read alone. Nothing is written.
func checkBackupLogs(ctx context.Context, from string, logged bool) error {
	var log sqlite.BlockLog
	if logged {
		logs, err := calllogs.Open(callsCopy(from), calllog.Options{ReadOnly: true})
		if err != nil {
			return fmt.Errorf("the backup's call logs %s: %w", callsCopy(from), err)
		}
		defer logs.Close()
		log = logs
	}
	err := sqlite.CheckCallLogs(ctx, from, log)
	var lost *sqlite.LostBlocksError
	switch {
	case errors.As(err, &lost):
		return fmt.Errorf("the backup %s is damaged: its call logs' copy %s lacks blocks its store records as synced: %s; "+
			"restore another backup (serve would refuse to start on this one)", from, callsCopy(from), lost.Missing())
	case errors.Is(err, sqlite.ErrCallsLost):
		return fmt.Errorf("the backup %s is damaged (%s is missing): %w; restore another backup (serve would refuse to start on this one)",
			from, callsCopy(from), err)
	case err != nil:
		return fmt.Errorf("cannot check the backup %s against its call logs: %w", from, err)
	}
	return nil
}

// storeFile is the embedded store's file in the data dir.
const storeFile = "mcpaudit.db"

// stateFile holds the partitions' marks in the data dir
// (pipeline.Config.StateFile).
const stateFile = "partitions.json"

// restoreReplaces are the files of a data dir that a restored store file
// replaces: the store file and SQLite's files beside it, its derived id
// index, its call log (ack "log"; the calls acknowledged after the backup
// are not restored, as with ack "commit") and the state file of the
// detector's watermarks, which speaks of the store it was written beside
// (and the embedded store's own, kept aside while serve ran on another
// store: switchStateFile), and the call logs (serve.sqlite.calls: log).
// The journals of the state files' counters go with them. The backup's
// call logs (FILE.calls/), state file, journal and call log (FILE.state/)
// replace them when it has them; with FILE.state/ the notify journal is
// replaced too.
var restoreReplaces = slices.Concat([]string{storeFile, storeFile + "-wal", storeFile + "-shm", storeFile + ".ids", storeFile + ".log", stateFile, "partitions.sqlite.json", "calls"},
	pipeline.CountLogNames(stateFile), pipeline.CountLogNames("partitions.sqlite.json"))

// moveAside moves the files of dir named in replaces (restoreReplaces)
// into a new directory beside them, and returns it with the names moved.
func moveAside(dir string, replaces []string) (string, []string, error) {
	aside := filepath.Join(dir, "before-restore-"+time.Now().UTC().Format("20060102T150405Z"))
	var moved []string
	for _, name := range replaces {
		p := filepath.Join(dir, name)
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return aside, moved, fmt.Errorf("not restored: %w", err)
		}
		if len(moved) == 0 {
			if err := os.Mkdir(aside, datadir.DirMode); err != nil {
				return aside, moved, fmt.Errorf("not restored: %w", err)
			}
		}
		if err := os.Rename(p, filepath.Join(aside, name)); err != nil {
			return aside, moved, fmt.Errorf("restore stopped after moving %v to %s: %w", moved, aside, err)
		}
		moved = append(moved, name)
	}
	return aside, moved, datadir.SyncDir(dir)
}

// copyInto copies src to dst durably (datadir.CopyFileSynced), readable by
// its owner only. The temporary files a restore killed while it copied
// left go first: each is as large as a store (the data dir is locked: no
// other restore writes one).
func copyInto(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	left, _ := filepath.Glob(datadir.TempGlob(dst))
	for _, f := range left {
		os.Remove(f)
	}
	if err := datadir.CopyFileSynced(dst, in, datadir.FileMode); err != nil {
		return fmt.Errorf("cannot copy %s: %w", src, err)
	}
	return nil
}
