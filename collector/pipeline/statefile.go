package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/mcpaudit/mcpaudit/internal/datadir"
	"time"
)

// stateVersion is the one version of the state file this release reads
// and writes.
const stateVersion = 2

// keptAside bounds how many state files set aside (setAside) a data
// directory keeps: past it the oldest are removed, so that a file damaged
// at every start (a disk failing) does not fill the directory. Each is at
// most the size of a state file (tens of KB for a thousand partitions).
const keptAside = 5

// StateFileError is a state file that cannot be understood: where in it
// (Line, Column and Offset, from 1, 1 and 0; zero when the file as a whole
// is at fault, as for another version) and in which field, and why.
type StateFileError struct {
	// Field is the JSON path of the value at fault ("partitions[3]",
	// "downtimes"), empty for the file's syntax as a whole.
	Field  string
	Offset int64
	Line   int
	Column int
	Err    error
}

func (e *StateFileError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d, column %d (byte %d)", e.Line, e.Column, e.Offset)
	}
	if e.Field != "" {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "field %s", e.Field)
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *StateFileError) Unwrap() error { return e.Err }

// errOtherVersion is returned (inside a StateFileError) for a state file
// of another version than stateVersion: written by a later release (a
// downgrade) or by one long before.
var errOtherVersion = errors.New("written by another release")

// decodeMarks decodes the content of a state file, of the one version this
// release reads (stateVersion), member by member, so that an error names
// where the file went wrong and what was read before it is kept: the
// members decoded without error are set in f, and good lists their names
// (none from a file of another version, whose fields may mean something
// else). The error, when not nil, is a *StateFileError; of several, the
// first in the file.
func decodeMarks(b []byte) (f markFile, good []string, err error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return f, nil, &StateFileError{Err: fmt.Errorf("the file is empty (%d bytes)", len(b))}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	fail := func(field string, off int64, e error) (markFile, []string, error) {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(e, &syn):
			// The offending byte is the last one read.
			return f, good, stateErrExact(b, field, syn.Offset-1, e)
		case errors.As(e, &typ) && typ.Offset > 0:
			off = typ.Offset
		case errors.Is(e, io.ErrUnexpectedEOF) || errors.Is(e, io.EOF):
			off = int64(len(b))
			e = fmt.Errorf("the file ends in the middle of a value (cut short at %d bytes)", len(b))
		}
		return f, good, stateErrAt(b, field, off, e)
	}
	if tok, err := dec.Token(); err != nil {
		return fail("", 0, err)
	} else if tok != json.Delim('{') {
		return fail("", 0, fmt.Errorf("not a JSON object"))
	}
	var first error
	for dec.More() {
		off := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return fail("", off, err)
		}
		key, _ := tok.(string)
		if key == "partitions" {
			// Line by line, so that a line at fault is named by its
			// index.
			if err := decodePartitions(dec, &f, b); err != nil {
				return f, good, err
			}
			good = append(good, key)
			continue
		}
		off = dec.InputOffset()
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fail(key, off, err)
		}
		if !markMembers[key] {
			good = append(good, key) // a member of a later release
			continue
		}
		// The value was read whole: if it is wrong, the members after it
		// can still be read.
		if err := decodeMember(&f, key, raw); err != nil {
			if first == nil {
				// Where the member's value begins: the error's own
				// offset is in the object decodeMember made.
				first = stateErrAt(b, key, dec.InputOffset()-int64(len(raw)), err)
			}
			continue
		}
		if key == "version" && f.Version != stateVersion {
			// Nothing else of it is taken: its fields may mean something
			// else.
			f, good = markFile{Version: f.Version}, nil
			return f, nil, stateErrAt(b, "version", off, fmt.Errorf("version %d, want %d: %w", f.Version, stateVersion, errOtherVersion))
		}
		good = append(good, key)
	}
	if _, err := dec.Token(); err != nil {
		return fail("", dec.InputOffset(), err)
	}
	if rest := bytes.TrimSpace(b[dec.InputOffset():]); len(rest) > 0 {
		return fail("", dec.InputOffset(), fmt.Errorf("%d bytes after the end of the object", len(rest)))
	}
	if first != nil {
		return f, good, first
	}
	if !slices.Contains(good, "version") {
		return f, good, stateErrAt(b, "version", 0, fmt.Errorf("no version: %w", errOtherVersion))
	}
	return f, good, nil
}

// markMembers are the names of markFile's members, from its json tags:
// the tags alone say which member of a state file goes where
// (decodeMember), and a name not among them is a later release's member,
// passed over.
var markMembers = func() map[string]bool {
	m := make(map[string]bool)
	t := reflect.TypeFor[markFile]()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			m[name] = true
		}
	}
	return m
}()

// decodeMember decodes raw, the value of the member key of a state file,
// into f as encoding/json decodes the object {key: raw}: into the field
// whose json tag is key. The caller checks key against markMembers:
// encoding/json would also take a key that differs in case.
func decodeMember(f *markFile, key string, raw json.RawMessage) error {
	name, err := json.Marshal(key)
	if err != nil {
		return err
	}
	doc := make([]byte, 0, len(name)+len(raw)+3)
	doc = append(append(append(append(doc, '{'), name...), ':'), raw...)
	return json.Unmarshal(append(doc, '}'), f)
}

// decodePartitions decodes the partitions array of a state file into f,
// one line at a time, so that a line at fault is named by its index; a
// file with one cannot be trusted, so none of them is kept.
func decodePartitions(dec *json.Decoder, f *markFile, b []byte) error {
	off := dec.InputOffset()
	name := func() string { return fmt.Sprintf("partitions[%d]", len(f.Partitions)) }
	wrap := func(field string, off int64, err error) error {
		var syn *json.SyntaxError
		switch {
		case errors.As(err, &syn):
			f.Partitions = nil
			return stateErrExact(b, field, syn.Offset-1, err)
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
			off = int64(len(b))
			err = fmt.Errorf("the file ends in the middle of a value (cut short at %d bytes)", len(b))
		}
		f.Partitions = nil
		return stateErrAt(b, field, off, err)
	}
	tok, err := dec.Token()
	if err != nil {
		return wrap("partitions", off, err)
	}
	if tok == nil {
		return nil
	}
	if tok != json.Delim('[') {
		return wrap("partitions", off, fmt.Errorf("not an array"))
	}
	for dec.More() {
		off := dec.InputOffset()
		var l markLine
		if err := dec.Decode(&l); err != nil {
			return wrap(name(), off, err)
		}
		f.Partitions = append(f.Partitions, l)
	}
	if _, err := dec.Token(); err != nil {
		return wrap("partitions", dec.InputOffset(), err)
	}
	return nil
}

// stateErrAt is err in the value of field that begins at or after byte
// off of b (the file's content): the decoder's offset between two values
// is before the separator and blanks that lead to the next.
func stateErrAt(b []byte, field string, off int64, err error) *StateFileError {
	if off <= 0 && field != "" {
		return &StateFileError{Field: field, Err: err}
	}
	for off > 0 && off < int64(len(b)) && (b[off] == ' ' || b[off] == '\n' || b[off] == '\t' || b[off] == '\r' || b[off] == ',' || b[off] == ':') {
		off++
	}
	return stateErrExact(b, field, off, err)
}

// stateErrExact is err at byte off of b, in field.
func stateErrExact(b []byte, field string, off int64, err error) *StateFileError {
	off = max(0, min(off, int64(len(b))))
	return &StateFileError{Field: field, Err: err, Offset: off,
		Line:   1 + bytes.Count(b[:off], []byte{'\n'}),
		Column: int(off) - bytes.LastIndexByte(b[:off], '\n')}
}

// setAside renames the state file at path, which cannot be read or
// understood, to path.bad-TIME (TIME the wall time now, UTC), so that the
// next save does not overwrite it: it stays for the operator to look at
// (docs/runbooks.md#a-state-file-set-aside). Past keptAside such files the
// oldest are removed. It returns the new name.
func setAside(path string, now time.Time) (string, error) {
	base := path + ".bad-" + now.UTC().Format("20060102T150405Z")
	name := base
	for i := 2; ; i++ {
		if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
			break
		}
		name = fmt.Sprintf("%s.%d", base, i)
	}
	if err := os.Rename(path, name); err != nil {
		return "", fmt.Errorf("cannot set aside the state file: %w", err)
	}
	if err := datadir.SyncDir(filepath.Dir(path)); err != nil {
		return name, fmt.Errorf("cannot set aside the state file: %s is in place, but %w: %w", name, datadir.ErrDirNotSynced, err)
	}
	old, err := filepath.Glob(filepath.Join(filepath.Dir(path), filepath.Base(path)+".bad-*"))
	if err != nil || len(old) <= keptAside {
		return name, nil
	}
	// The names sort by time (a second's second file after its first).
	slices.SortFunc(old, func(a, b string) int { return strings.Compare(sortKey(a), sortKey(b)) })
	for _, o := range old[:len(old)-keptAside] {
		if o != name {
			os.Remove(o)
		}
	}
	return name, nil
}

// sortKey makes the names setAside gives sort by time: a second's later
// files (".2", ".3") after its first.
func sortKey(name string) string {
	i := strings.LastIndex(name, ".bad-")
	if i < 0 {
		return name
	}
	t, n, _ := strings.Cut(name[i+len(".bad-"):], ".")
	return fmt.Sprintf("%s.%08s", t, n)
}

// StateFileTrouble is what a start found wrong with the state file, told
// by the status (Pipeline.StateFileTrouble).
type StateFileTrouble struct {
	// SetAside is where a file that could not be read or understood was
	// moved (setAside), empty when none was, or it could not be moved.
	SetAside string
	// Reason is why, with where in the file (StateFileError).
	Reason string
	// Kept names the members of such a file read all the same
	// (downtimes, withdrawals).
	Kept []string
	// SourcesInFile counts the sources the file kept for its partitions
	// (delivering and quiet); SourcesToOverflow those a partition had no
	// room for (detect.Config.MaxSources: a file of a larger max_sources)
	// that hold it through its overflow source, and SourcesDropped the
	// quiet ones left out. Zero when every source was restored.
	SourcesInFile, SourcesToOverflow, SourcesDropped int
}

// readAside handles a state file at path that exists but cannot be read
// (rerr) or understood (derr): it sets it aside (setAside) and says so,
// and returns what of f (decoded as far as it went) a start can use
// without the rest: the history of downtimes and the withdrawals waiting
// for the store, when those members were read whole.
func readAside(path string, now time.Time, f markFile, good []string, rerr, derr error, log *slog.Logger) (runState, StateFileTrouble) {
	why := rerr
	if why == nil {
		why = derr
	}
	tr := StateFileTrouble{Reason: why.Error()}
	var run runState
	if derr != nil {
		if slices.Contains(good, "downtimes") {
			run.downtimes = f.Downtimes
			tr.Kept = append(tr.Kept, "downtimes")
		}
		if slices.Contains(good, "withdrawals") {
			run.withdrawals = f.Withdrawals
			tr.Kept = append(tr.Kept, "withdrawals")
		}
		// The counters' values: a scrape showed no more than them, so a
		// start begins them there, marks lost or not.
		if slices.Contains(good, "counters") && len(f.Counters) > 0 {
			run.counts = f.Counters
			tr.Kept = append(tr.Kept, "counters")
		}
		if slices.Contains(good, "counters_log") && f.CountersLog != nil {
			run.countsLog = f.CountersLog
			tr.Kept = append(tr.Kept, "counters_log")
		}
	}
	name, err := setAside(path, now)
	tr.SetAside = name
	args := []any{"path", path, "reason", tr.Reason}
	if name != "" {
		args = append(args, "set_aside", name)
	}
	if err != nil && !renamed(err) {
		args = append(args, "set_aside_err", err)
	}
	kept := "nothing"
	if len(tr.Kept) > 0 {
		kept = strings.Join(tr.Kept, " and ")
	}
	args = append(args, "kept", kept, "runbook", "docs/runbooks.md#a-state-file-set-aside")
	msg := "the state file cannot be understood: set aside (not overwritten) and the partitions' watermarks taken as lost; every stored call is judged again"
	if errors.Is(derr, errOtherVersion) {
		msg = "the state file is of another version (a later release's, after a downgrade?): set aside (not overwritten) and its partitions' watermarks taken as lost; every stored call is judged again"
	} else if rerr != nil {
		msg = "the state file cannot be read: set aside (not overwritten) and the partitions' watermarks taken as lost; every stored call is judged again"
	}
	log.Warn(msg, args...)
	return run, tr
}
