package pipeline_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_QuietPartitionKeepsItsWatermark: a poster sends a write
// left pending and a few reads, then goes quiet; the partition's watermark
// follows the wall clock, the write's window closes (an unverified_write)
// and is committed. The collector is then restarted three times with no
// new call. Each restart must start from where the watermark stood: not
// from the last stored call, which would open the closed window again,
// save the older watermark as the partition's mark, and make every later
// restart announce the write states again (mcpaudit_writes_total counting
// with no new call) and replay from further back.
func TestRestart_QuietPartitionKeepsItsWatermark(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	key := detect.PartitionKey{Server: "thegram"}
	r := openRun(t, dir, clock, nil, nil)
	t0 := wallStart.Add(-time.Minute)
	sendPendingThenReads(t, r, t0)
	// Quiet for 20 minutes: the window (5 min) closes on the wall clock.
	for range 40 {
		clock.Add(30 * time.Second)
		r.status()
	}
	before := r.status()[key].Watermark
	o := r.stop()
	if len(o.findings) != 1 {
		t.Fatalf("%d findings before the restarts, want the unverified_write", len(o.findings))
	}
	if last := t0.Add(10 * time.Second); !before.After(last.Add(10 * time.Minute)) {
		t.Fatalf("the quiet partition's watermark is %s, not past its last call %s with the wall clock", before, last)
	}

	for i := range 3 {
		clock.Add(time.Second)
		r = openRun(t, dir, clock, nil, nil)
		clock.Add(3 * time.Second) // past a new partition's hold
		if wm := r.status()[key].Watermark; wm.Before(before) {
			t.Errorf("restart %d: the watermark went back from %s to %s", i+1, before.Format(time.TimeOnly), wm.Format(time.TimeOnly))
		}
		got := r.stop()
		if len(got.findings) != 1 {
			t.Errorf("restart %d: %d findings stored, want the 1 from before", i+1, len(got.findings))
		}
		r.rec.mu.Lock()
		writes, findings := len(r.rec.writes), len(r.rec.findings)
		r.rec.mu.Unlock()
		if writes+findings > 0 {
			t.Errorf("restart %d with no new call announced %d write states and %d findings again (committed 20 minutes before the stop)", i+1, writes, findings)
		}
	}
}

// TestRestart_QuietPartitionClosesWindowsOnTime: a write is left pending
// and its poster goes quiet; the collector stops with the write's window
// still open, and starts again after the window's end. The window closes
// at once, as it would have had the collector stayed up: not only once the
// replayed calls' clock, going on at the wall clock's pace from the last
// stored call, reaches its end (as long after the start as the window's
// end was after that call). Found from outside: a quiet server restarted
// 2.5 minutes after a stop gave its unverified_write 3.5 minutes late,
// and a partition's lag stayed that much behind the wall clock.
func TestRestart_QuietPartitionClosesWindowsOnTime(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	key := detect.PartitionKey{Server: "thegram"}
	r := openRun(t, dir, clock, nil, nil)
	t0 := wallStart.Add(-time.Minute)
	sendPendingThenReads(t, r, t0)
	// Quiet for 2 minutes: the watermark follows the wall clock, the
	// window (5 min from t0) is still open at the stop.
	for range 4 {
		clock.Add(30 * time.Second)
		r.status()
	}
	if o := r.stop(); len(o.findings) != 0 {
		t.Fatalf("%d findings before the stop, want none yet", len(o.findings))
	}
	clock.Add(6 * time.Minute) // down past the window's end
	r = openRun(t, dir, clock, nil, nil)
	start := clock.Now()
	for clock.Now().Sub(start) < 5*time.Minute {
		clock.Add(5 * time.Second)
		r.status()
		if _, fs := r.rec.snapshot(); len(fs) > 0 {
			break
		}
	}
	if _, fs := r.rec.snapshot(); len(fs) != 1 {
		t.Fatalf("%d findings 5 minutes after the restart, want the unverified_write", len(fs))
	}
	if took := clock.Now().Sub(start); took > time.Minute {
		t.Errorf("the unverified_write came %s after the restart; its window had ended before it", took)
	}
	if wm := r.status()[key].Watermark; clock.Now().Sub(wm) > time.Minute {
		t.Errorf("the quiet partition's watermark is %s behind the wall clock after the restart", clock.Now().Sub(wm))
	}
}

// sendPendingThenReads has a poster send, from t0, a write left pending
// and ten reads a second apart.
func sendPendingThenReads(t *testing.T, r *run, t0 time.Time) {
	t.Helper()
	if _, err := r.ingest(batch(t, "poster", pendingPatchLine("s0", 1, t0, "team/x.gram"))); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := r.ingest(batch(t, "poster", callLine("thegram", "s1", 10+i, t0.Add(time.Duration(i+1)*time.Second)))); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRestart_FreedPartitionNotAnnouncedAgain: as
// TestRestart_QuietPartitionKeepsItsWatermark, but the quiet partition is
// freed as idle before the stop (a quiet system at night), so it has no
// mark of its own in the state file. The replay at start judges its
// stored calls again (they are within the horizon); what they caused was
// committed before the partition was freed, so no write state or finding
// is announced again (metrics would count the writes twice), and the
// freed partition holds nothing back at start. A second restart, after
// the replayed partition was freed again, announces nothing either.
func TestRestart_FreedPartitionNotAnnouncedAgain(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	key := detect.PartitionKey{Server: "thegram"}
	r := openRun(t, dir, clock, nil, nil)
	t0 := wallStart.Add(-time.Minute)
	sendPendingThenReads(t, r, t0)
	for range 40 {
		clock.Add(30 * time.Second)
		r.status()
	}
	freeIdle(t, r, key)
	o := r.stop()
	if len(o.findings) != 1 {
		t.Fatalf("%d findings before the restarts, want the unverified_write", len(o.findings))
	}

	for i := range 2 {
		clock.Add(time.Second)
		r = openRun(t, dir, clock, nil, nil)
		clock.Add(3 * time.Second)
		r.status()
		logs := r.logs.String()
		if !strings.Contains(logs, " partitions=0 replayed_calls=11 ") {
			t.Fatalf("restart %d did not replay the freed partition's 11 calls:\n%s", i+1, logs)
		}
		if strings.Contains(logs, "hold their watermarks") {
			t.Errorf("restart %d: the freed partition holds its watermark:\n%s", i+1, logs)
		}
		r.rec.mu.Lock()
		writes, findings := len(r.rec.writes), len(r.rec.findings)
		r.rec.mu.Unlock()
		if writes+findings > 0 {
			t.Errorf("restart %d announced %d write states and %d findings again (committed before the partition was freed)", i+1, writes, findings)
		}
		freeIdle(t, r, key)
		if got := r.stop(); len(got.findings) != 1 {
			t.Errorf("restart %d: %d findings stored, want the 1 from before", i+1, len(got.findings))
		}
	}
}

// TestRestart_FreedPartitionComesBack: a partition freed as idle comes
// back with a write dated before the watermark it was freed at (a late
// poster's backlog). The watermark it was freed at no longer says what of
// its calls was committed (a call dated before it may be judged and not
// yet committed): the state file drops it before the call is
// acknowledged. The collector crashes before the write's window closes;
// after the restart the window closes and its unverified_write is stored
// and announced.
func TestRestart_FreedPartitionComesBack(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	key := detect.PartitionKey{Server: "thegram"}
	r := openRun(t, dir, clock, nil, nil)
	sendPendingThenReads(t, r, wallStart.Add(-time.Minute))
	for range 40 {
		clock.Add(30 * time.Second)
		r.status()
	}
	freeIdle(t, r, key)
	freed := func() bool {
		var f struct {
			Freed []struct{ Server string } `json:"freed"`
		}
		b, err := os.ReadFile(filepath.Join(dir, "partitions.json"))
		if err != nil || json.Unmarshal(b, &f) != nil {
			t.Fatalf("cannot read the state file: %v", err)
		}
		return len(f.Freed) == 1 && f.Freed[0].Server == key.Server
	}
	// The file is rewritten at most once a second.
	clock.Add(time.Second)
	for deadline := time.Now().Add(5 * time.Second); !freed(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the state file does not keep the freed partition")
		}
	}
	late := batch(t, "poster", pendingPatchLine("s9", 1, clock.Now().Add(-90*time.Second), "team/y.gram"))
	if _, err := r.p.Ingest(context.Background(), late); err != nil {
		t.Fatal(err)
	}
	// Acknowledged: the state file no longer says its calls up to the
	// watermark it was freed at were committed.
	if freed() {
		t.Error("the partition came back, and the state file still keeps it as freed")
	}
	r.status()
	before := r.crash()
	if len(before) != 1 {
		t.Fatalf("%d findings before the crash, want the first unverified_write", len(before))
	}
	r = openRun(t, dir, clock, nil, nil)
	for range 20 {
		clock.Add(30 * time.Second)
		r.status()
	}
	got := r.stop()
	if len(got.findings) != 2 {
		t.Errorf("%d findings after the restart, want 2: the late write's unverified_write was taken as committed", len(got.findings))
	}
	if _, fs := r.rec.snapshot(); len(fs) != 1 {
		t.Errorf("%d findings announced after the restart, want the late write's", len(fs))
	}
}
