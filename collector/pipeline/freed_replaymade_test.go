package pipeline_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
)

// unwritableStateFile puts a directory in place of the state file; it returns the
// file's bytes and a func that puts them back (the disk recovers).
func unwritableStateFile(t *testing.T, dir string) (saved []byte, restore func()) {
	t.Helper()
	path := filepath.Join(dir, "partitions.json")
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	return saved, func() {
		t.Helper()
		if err := os.RemoveAll(path); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, saved, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFreed_ReplayMadeEntryLeavesFileFirst: after a restart, a freed
// partition the replay made again is no longer kept freed, but the file
// keeps it until the first save. With the file unwritable from the start,
// a late call of it passed comeback with no write and was acknowledged
// (found by review13d); it is refused now until the file drops the
// partition, and the sender's retry is then stored and judged.
func TestFreed_ReplayMadeEntryLeavesFileFirst(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	key := detect.PartitionKey{Server: "thegram"}
	r := openRun(t, dir, clock, nil, nil)
	wm := freedBeforeStop(t, r, dir, clock, key)
	r.crash()
	clock.Add(time.Second)
	// no commit (so no save) before the file turns unwritable: as with
	// the disk full at the start, where every save fails
	r = openRun(t, dir, clock, func(c *pipeline.Config) { c.CommitEvery = time.Hour }, nil)
	time.Sleep(300 * time.Millisecond)
	t.Logf("300ms after start: file keeps freed %v", freedIn(t, dir, key))
	_, restore := unwritableStateFile(t, dir)
	late := lateWrite(t, wm.Add(-6*time.Minute))
	if _, err := r.ingest(late); !errors.Is(err, audit.ErrUnavailable) {
		t.Fatalf("a late call of a partition the file keeps freed, the file unwritable: %v, want refused", err)
	}
	restore()
	if _, err := r.ingest(late); err != nil { // the sender retries
		t.Fatal(err)
	}
	r.crash()
	if !freedIn(t, dir, key).IsZero() {
		t.Errorf("the file still keeps the partition freed after a call of it was stored")
	}
	clock.Add(time.Second)
	r = openRun(t, dir, clock, nil, nil)
	r.lateAnnounced(late, false, 20, nil)
}
