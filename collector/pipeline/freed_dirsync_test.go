package pipeline

import (
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

// TestFreed_DirSyncFailsAfterRename: a save whose rename succeeded but
// whose directory sync failed (writeFileSynced, made to fail after the
// rename: a fake, for a fault this file system cannot be made to show) has put the file in place, with
// the partition freed since the last write. It counts as written: a late
// call of that partition has comeback write the file without it. Taken as
// not written, the entry stayed marked as not on disk, comeback wrote
// nothing, and the call was stored under a file keeping the partition
// freed (found by review13f with strace injecting EIO).
func TestFreed_DirSyncFailsAfterRename(t *testing.T) {
	r := newFreedRig(t)
	first := r.batch(1, r.wall.Add(-time.Minute))
	r.ack(first)
	write := writeFileSynced
	t.Cleanup(func() { writeFileSynced = write })
	writeFileSynced = func(path string, data []byte, perm fs.FileMode) error {
		if err := write(path, data, perm); err != nil {
			return err
		}
		return fmt.Errorf("%s is in place, but %w: injected", path, datadir.ErrDirNotSynced)
	}
	wm := r.expire()
	r.save()
	if _, kept := r.restart(); !kept {
		t.Fatal("the file does not keep thegram freed: the test shows nothing")
	}
	late := r.batch(3, wm.Add(-6*time.Minute))
	at := late.Records[0].Call.Time
	arrived, err := r.p.comeback([]audit.Batch{late})
	if err != nil {
		t.Fatalf("comeback, the file replaced but its directory not synced: %v; want taken (the file is in place)", err)
	}
	arrived()
	committed, kept := r.restart()
	if kept || committed(at) || committed(at.Add(5*time.Minute)) {
		t.Errorf("a late call stored with the file on disk keeping thegram freed (kept %v): its output taken as committed after a crash", kept)
	}
}
