package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
	"github.com/mcpaudit/mcpaudit/internal/spool"
)

// A backup holds, beside the store file, what serve resumes from (debt52):
// the state file with its counters' journal, the notify journal, and the
// call log of ack "log" (calls acknowledged, not yet committed). Without
// them a restored serve judged every stored call again, its counters
// began at 0 (Prometheus read a reset, and the replay counted every stored
// call again on top of what it had scraped before), a finding waiting to
// be notified was never sent and one sent could be sent again, and with
// ack "log" the calls acknowledged and not yet drained were lost.

// stateCopy is the directory where backup copies those files for the
// backup written to file, and restore finds them.
func stateCopy(file string) string { return file + ".state" }

// notifyJournal is the notifier's journal in the data dir
// (exporter/notify).
const notifyJournal = "notify-journal.ndjson"

// stateCopied says what backupState copied.
type stateCopied struct {
	// State is whether a state file was copied; Counters whether its
	// counters' journal was too (else why not).
	State    bool
	Counters error
	// Notify is whether the notify journal was copied.
	Notify bool
	// LogFiles counts the files of the call log (ack "log") copied.
	LogFiles int
}

// embeddedStateFile returns the state file of the embedded store in dir:
// partitions.json, unless it was written for another store (serve runs
// on ClickHouse), then the embedded store's parked one
// (switchStateFile).
func embeddedStateFile(dir string) string {
	cur := filepath.Join(dir, stateFile)
	if owner, _, err := pipeline.StateStore(cur); err == nil && owner != "" && owner != "sqlite" {
		return filepath.Join(dir, parkedStateFile("sqlite"))
	}
	return cur
}

// backupState copies into out (a new directory) the files of the data dir
// dir that serve resumes from, before the store file is copied, so that
// the store's copy holds everything they speak of: the state file and its
// counters' journal (pipeline.CopyState: the marks cover output committed
// before the file was written), the notify journal, and the call log's
// segments (each call in them either still in the log or committed before
// the store's copy begins; a call of both is stored once at the restored
// start).
func backupState(dir, out string) (stateCopied, error) {
	var c stateCopied
	if err := os.Mkdir(out, datadir.DirMode); err != nil {
		return c, fmt.Errorf("cannot back the state up: %w", err)
	}
	var err error
	c.State, err = pipeline.CopyState(embeddedStateFile(dir), out, stateFile)
	if errors.Is(err, pipeline.ErrCountersNotCopied) {
		c.Counters, err = err, nil
	}
	if err != nil {
		return c, err
	}
	if c.Notify, err = copyIfExists(filepath.Join(dir, notifyJournal), filepath.Join(out, notifyJournal)); err != nil {
		return c, err
	}
	c.LogFiles, err = copyLogDir(sqlite.LogDir(filepath.Join(dir, storeFile)), sqlite.LogDir(filepath.Join(out, storeFile)))
	if err != nil {
		return c, err
	}
	return c, datadir.SyncDir(out)
}

// restoreState copies the files backupState copied into from into the
// data dir dir (after restore moved aside those they replace).
func restoreState(from, dir string) error {
	for _, name := range append([]string{stateFile, notifyJournal}, pipeline.CountLogNames(stateFile)...) {
		if _, err := copyIfExists(filepath.Join(from, name), filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	if _, err := copyLogDir(sqlite.LogDir(filepath.Join(from, storeFile)), sqlite.LogDir(filepath.Join(dir, storeFile))); err != nil {
		return err
	}
	return datadir.SyncDir(dir)
}

// copyIfExists copies the file src to dst durably; false when src does
// not exist.
func copyIfExists(src, dst string) (bool, error) {
	in, err := os.Open(src)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cannot copy %s: %w", src, err)
	}
	defer in.Close()
	if err := datadir.CopyFileSynced(dst, in, datadir.FileMode); err != nil {
		return false, fmt.Errorf("cannot copy %s: %w", src, err)
	}
	return true, nil
}

// copyLogDir copies the segments (and batch files of earlier releases) of
// the call log of ack "log" in src, if it exists, into dst, created, and
// returns how many it copied. A segment removed meanwhile (all its calls
// committed) is passed over; one appended to meanwhile may end in a torn
// frame, cut when the log is opened (never acknowledged before the copy
// began). The lock, frames set aside and torn tails are not copied.
func copyLogDir(src, dst string) (int, error) {
	entries, err := os.ReadDir(src)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("cannot copy the call log %s: %w", src, err)
	}
	if err := os.MkdirAll(dst, datadir.DirMode); err != nil {
		return 0, fmt.Errorf("cannot copy the call log: %w", err)
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, spool.SegExt) && !strings.HasSuffix(name, spool.Ext) {
			continue
		}
		ok, err := copyIfExists(filepath.Join(src, name), filepath.Join(dst, name))
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, datadir.SyncDir(dst)
}

// String says what was copied, for backup's output.
func (c stateCopied) String() string {
	var parts []string
	switch {
	case !c.State:
		parts = append(parts, "no state file")
	case c.Counters != nil:
		parts = append(parts, "the state file without its counters")
	default:
		parts = append(parts, "the state file and its counters")
	}
	if c.Notify {
		parts = append(parts, "the notify journal")
	}
	if c.LogFiles > 0 {
		parts = append(parts, fmt.Sprintf("%d files of the call log (ack log)", c.LogFiles))
	}
	return strings.Join(parts, ", ")
}
