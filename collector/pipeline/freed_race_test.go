package pipeline

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestFreed_RetryAfterFailedComebackWrites: a comeback whose write fails
// is refused; the disk recovers and the sender's retry is stored. The
// first version forgot the partition in memory at the failure, so the
// retry's comeback wrote nothing and the file on disk still kept the
// partition freed over the stored call: a crash then took the late
// write's output as committed (found by review13d).
func TestFreed_RetryAfterFailedComebackWrites(t *testing.T) {
	r := newFreedRig(t)
	wm, _ := r.freedOnDisk()
	saved, _ := os.ReadFile(r.path)
	os.Remove(r.path)
	os.MkdirAll(filepath.Join(r.path, "x"), 0o755) // unwritable
	late := r.batch(2, wm.Add(-6*time.Minute))
	at := late.Records[0].Call.Time
	if _, err := r.p.comeback([]audit.Batch{late}); err == nil {
		t.Fatal("first comeback did not fail")
	}
	os.RemoveAll(r.path) // the disk recovers
	os.WriteFile(r.path, saved, 0o644)
	if _, err := r.p.comeback([]audit.Batch{late}); err != nil { // the sender's retry
		t.Fatal(err)
	}
	// stored (p.append), crash before lowerFloor / the next save
	committed, kept := r.restart()
	if kept && (committed(at) || committed(at.Add(5*time.Minute))) {
		t.Errorf("retry stored with the file still keeping thegram freed (wm %v): a restart takes output at %v/%v as committed", wm, committed(at), committed(at.Add(5*time.Minute)))
	}
}

// TestFreed_FreeBetweenComebackAndAppend: the engine frees a partition
// while a request of it is between comeback and lowerFloor (comeback found
// it live, nothing to forget), and a save follows, then the call is stored
// and the process dies before lowerFloor: the file must not keep the
// partition freed over the stored call (found by review13d; free skips a
// partition arriving).
func TestFreed_FreeBetweenComebackAndAppend(t *testing.T) {
	r := newFreedRig(t)
	first := r.batch(1, r.wall.Add(-time.Minute))
	r.ack(first)
	at := first.Records[0].Call.Time.Add(time.Second)
	late := r.batch(2, at)
	if _, err := r.p.comeback([]audit.Batch{late}); err != nil { // Ingest: comeback
		t.Fatal(err)
	}
	wm := r.expire() // engine goroutine frees thegram
	r.save()         // and saves after a commit
	// Ingest: p.append stores late; the process dies before lowerFloor.
	committed, kept := r.restart()
	t.Logf("wm %v late at %v kept %v floor %v", wm, at, kept, r.p.floor)
	if kept && (committed(at) || committed(at.Add(5*time.Minute))) {
		t.Errorf("late call stored under a file keeping thegram freed: output at %v/%v taken as committed", committed(at), committed(at.Add(5*time.Minute)))
	}
}
