package pipeline_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestRestart_DeferredWindowNotLost: a write's verification window ends
// while its source is still active but far behind (deferred: what the
// source sends next may settle it). Another source moves the watermark
// well past the deadline and that watermark is committed as the
// partition's mark; the process then dies before the deferred window
// closes. The restart must still report the unverified_write: it was never
// committed, though its nominal deadline is older than the mark less the
// lateness bounds.
func TestRestart_DeferredWindowNotLost(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	t0 := wallStart.Add(-30 * time.Minute) // a backlog
	must := func(_ int, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.ingest(batch(t, "fast", callLine("thegram", "f", 1, t0))))
	must(r.ingest(batch(t, "slow", pendingPatchLine("s0", 1, t0.Add(time.Second), "team/x.gram"))))
	clock.Add(3 * time.Second) // past the new partition's hold
	// slow goes idle; fast moves the watermark to 4 minutes past the write.
	clock.Add(11 * time.Second)
	must(r.ingest(batch(t, "fast", callLine("thegram", "f", 2, t0.Add(4*time.Minute)))))
	// slow comes back, far behind (its call too late): active, it no longer
	// holds the watermark, and the write's window waits for it.
	must(r.ingest(batch(t, "slow", callLine("thegram", "s1", 2, t0.Add(2*time.Second)))))
	for i := range 6 {
		clock.Add(time.Second)
		must(r.ingest(batch(t, "fast", callLine("thegram", "f", 3+i, t0.Add(time.Duration(5+i)*time.Minute)))))
		must(r.ingest(batch(t, "slow", callLine("thegram", "s1", 3+i, t0.Add(2*time.Second)))))
	}
	clock.Add(time.Second)
	r.status()
	// Wait for the commit that saves the mark at t0+10m-1s.
	want := t0.Add(10*time.Minute - time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if mk := savedMark(t, dir); !mk.Before(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mark %s was not saved (have %s)", want, savedMark(t, dir))
		}
		clock.Add(time.Second)
		must(r.ingest(batch(t, "slow", callLine("thegram", "s1", 100, t0.Add(2*time.Second)))))
		time.Sleep(20 * time.Millisecond)
	}
	before := r.read()
	if n := unverified(before); n != 0 {
		t.Fatalf("%d unverified_write committed before the crash: the window was not deferred", n)
	}
	if len(before.writes) != 1 {
		t.Fatalf("%d writes committed before the crash, want the pending write", len(before.writes))
	}
	r.crash()

	clock.Add(time.Second)
	r = openRun(t, dir, clock, nil, nil)
	clock.Add(time.Minute) // every source idle, every window closed
	r.status()
	o := r.stop()
	if n := unverified(o); n != 1 {
		t.Fatalf("%d unverified_write stored after the restart, want 1 (the deferred window, never committed)", n)
	}
	for k, st := range o.writes {
		if st != audit.StateUnverified {
			t.Errorf("write %s stored %s after the restart, want unverified", k, st)
		}
	}
}

// savedMark returns the watermark of thegram in the state file.
func savedMark(t *testing.T, dir string) time.Time {
	b, err := os.ReadFile(filepath.Join(dir, "partitions.json"))
	if err != nil {
		return time.Time{}
	}
	var f struct {
		Partitions []struct {
			Server    string    `json:"server"`
			Watermark time.Time `json:"watermark"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Partitions {
		if p.Server == "thegram" {
			return p.Watermark
		}
	}
	return time.Time{}
}

func unverified(o outcome) int {
	n := 0
	for _, f := range o.findings {
		if f.Kind == audit.KindUnverifiedWrite {
			n++
		}
	}
	return n
}
