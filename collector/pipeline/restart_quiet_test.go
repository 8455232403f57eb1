package pipeline_test

import (
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
