package pipeline

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

// ErrCountersNotCopied is returned by CopyState when the state file was
// copied without the counters' journal it names: the journal could not be
// read up to the record the file names (missing or damaged). A start from
// the copy then begins the counters at 0 with a WARN, as a start from the
// original would have.
var ErrCountersNotCopied = errors.New("the counters' journal was not copied")

// copyStateTries bounds how often CopyState reads the state file again
// when the journal it names was written anew twice meanwhile (once every
// ~50 saves, at most one save a second): a read that fails so many times
// is not such a race.
const copyStateTries = 10

// CopyState copies the state file at path into the directory dir as name
// (the name the file has in a data dir: partitions.json), with the
// records of the counters' journal it names up to the one that goes with
// its marks, under the journal's name for name (CountLogNames), each
// written durably, the journal before the file: a start on dir reads the
// marks, downtimes, waiting withdrawals and counters the file held when it
// was read, as a start after a crash at that instant would have. It is
// made to be taken beside a running serve (mcpaudit backup): the file is
// read once, whole (serve renames a new one over it); the journal it names
// is never written over while the file on disk names it, and one written
// anew twice between the two reads (another id) has the file read again.
// path may be a state file parked under another name (a switch of
// serve.store: partitions.sqlite.json): its journal is then found under
// path's names. It returns false, and no error, when path does not exist.
// A journal that cannot be read up to the record named leaves the file
// copied alone, and the error wraps ErrCountersNotCopied.
func CopyState(path, dir, name string) (bool, error) {
	var b []byte
	var journalErr error
	for range copyStateTries {
		var err error
		b, err = os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("cannot read the state file: %w", err)
		}
		f, _, err := decodeMarks(b)
		if err != nil {
			return false, fmt.Errorf("cannot copy the state file %s: %w", path, err)
		}
		ref := f.CountersLog
		if ref == nil {
			return true, writeState(filepath.Join(dir, name), b)
		}
		i := slices.Index(CountLogNames(name), ref.File)
		if i < 0 {
			journalErr = fmt.Errorf("%q: %w", ref.File, errCountLogName)
			break
		}
		j, err := os.ReadFile(filepath.Join(filepath.Dir(path), CountLogNames(path)[i]))
		if err == nil {
			var end int
			if _, end, err = scanCountLog(j, ref); err == nil {
				if err := writeState(filepath.Join(dir, ref.File), j[:end]); err != nil {
					return false, err
				}
				return true, writeState(filepath.Join(dir, name), b)
			}
		}
		journalErr = err
	}
	if err := writeState(filepath.Join(dir, name), b); err != nil {
		return false, err
	}
	return true, fmt.Errorf("%w: %w", ErrCountersNotCopied, journalErr)
}

// writeState writes b to path durably (a temporary file synced, renamed,
// the directory synced), readable by its owner only.
func writeState(path string, b []byte) error {
	if err := datadir.WriteFileSynced(path, b, datadir.FileMode); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	return nil
}
