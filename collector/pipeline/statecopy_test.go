package pipeline

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// stateWithJournal writes into dir a state file named name whose counters'
// journal (under journalName, in dir) has three records, the state file
// naming the second: the third was appended by a save whose state file a
// crash kept from being written. It returns the state file's path.
func stateWithJournal(t *testing.T, dir, name, journalName string) string {
	t.Helper()
	l, err := writeCountLog(dir, journalName, 1, []byte(`{"snapshot":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if err := l.append([]byte(`{"delta":2}`)); err != nil {
		t.Fatal(err)
	}
	ref := l.ref()
	if err := l.append([]byte(`{"delta":3}`)); err != nil {
		t.Fatal(err)
	}
	// The file names the journal by its name beside partitions.json
	// (a parked file keeps it: moveCountLog renames the files only).
	ref.File = CountLogNames("partitions.json")[0]
	b, err := json.Marshal(markFile{Version: stateVersion, Store: "sqlite", Run: runRunning, CountersLog: ref, Partitions: []markLine{}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCopyState: the copy holds the state file as it was and its
// journal's records up to the one it names, not the one a crash left
// after it, under the names a data dir's state file has; from a parked
// state file (partitions.sqlite.json) too. A journal missing leaves the
// state file copied alone, with ErrCountersNotCopied; no state file, no
// copy.
func TestCopyState(t *testing.T) {
	f := func(name, journalName string) {
		t.Helper()
		src, dst := t.TempDir(), t.TempDir()
		path := stateWithJournal(t, src, name, journalName)
		ok, err := CopyState(path, dst, "partitions.json")
		if !ok || err != nil {
			t.Fatalf("%s: CopyState: %v, %v", name, ok, err)
		}
		want, _ := os.ReadFile(path)
		if got, _ := os.ReadFile(filepath.Join(dst, "partitions.json")); string(got) != string(want) {
			t.Errorf("%s: the state file copied differs:\n%s\nwant\n%s", name, got, want)
		}
		values, err := ReadCountLog(filepath.Join(dst, "partitions.json"))
		if err != nil || len(values) != 2 || string(values[1]) != `{"delta":2}` {
			t.Errorf("%s: the copy's counters: %q, %v; want the snapshot and the first delta", name, values, err)
		}
		j, _ := os.ReadFile(filepath.Join(dst, "partitions.counts.a"))
		orig, _ := os.ReadFile(filepath.Join(src, journalName))
		if len(j) >= len(orig) {
			t.Errorf("%s: the journal's copy keeps the record after the one named (%d bytes of %d)", name, len(j), len(orig))
		}
	}
	f("partitions.json", "partitions.counts.a")
	f("partitions.sqlite.json", "partitions.sqlite.counts.a")

	src, dst := t.TempDir(), t.TempDir()
	path := stateWithJournal(t, src, "partitions.json", "partitions.counts.a")
	os.Remove(filepath.Join(src, "partitions.counts.a"))
	ok, err := CopyState(path, dst, "partitions.json")
	if !ok || !errors.Is(err, ErrCountersNotCopied) {
		t.Errorf("journal missing: CopyState: %v, %v; want the state file copied and ErrCountersNotCopied", ok, err)
	}
	if _, err := os.Stat(filepath.Join(dst, "partitions.json")); err != nil {
		t.Errorf("journal missing: the state file was not copied: %v", err)
	}

	if ok, err := CopyState(filepath.Join(t.TempDir(), "partitions.json"), t.TempDir(), "partitions.json"); ok || err != nil {
		t.Errorf("no state file: CopyState: %v, %v; want false, nil", ok, err)
	}
}
