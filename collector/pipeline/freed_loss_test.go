package pipeline_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// freedBeforeStop has a poster send thegram a write left pending and
// reads, frees the partition as idle (the only one) once the write's
// window closed, and waits until the state file keeps it as freed; it
// returns the watermark.
func freedBeforeStop(t *testing.T, r *run, dir string, clock *testClock, key detect.PartitionKey) time.Time {
	t.Helper()
	sendPendingThenReads(t, r, wallStart.Add(-time.Minute))
	r.steps(40, nil)
	freeIdle(t, r, key)
	var wm time.Time
	for deadline := time.Now().Add(hangCeiling); wm.IsZero(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the state file does not keep the freed partition")
		}
		clock.Add(time.Second)
		r.status()
		wm = freedIn(t, dir, key)
	}
	return wm
}

// TestFreed_StoredNotAckedLateWriteOfFreedPartition: a late write of a
// freed partition is stored and the process dies before acknowledging it
// (crashStore.dieAfterAppend): lowerFloor never ran, so the state file
// still keeps the partition as freed (floor zero: no partition left). A
// restart on that file takes the stored write (before the freed
// watermark) as committed and passes over it, though no run ever judged
// it: so comeback writes the file without the partition before the
// append. The sender re-sends the unacknowledged batch after its backoff:
// the engine drops it as a repeat. One uninterrupted run would store the
// late write's unverified_write (the partition begun anew).
func TestFreed_StoredNotAckedLateWriteOfFreedPartition(t *testing.T) {
	for _, backoff := range []int{0, 1, 2, 4, 10, 20, -1} {
		t.Run(map[bool]string{true: fmt.Sprintf("resent_after_%ds", backoff*30), false: "never_resent"}[backoff >= 0], func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock(wallStart)
			key := detect.PartitionKey{Server: "thegram"}
			r := openRun(t, dir, clock, nil, nil)
			wm := freedBeforeStop(t, r, dir, clock, key)
			at := wm.Add(-6 * time.Minute)
			r.cs.dieAfterAppend.Store(true)
			if _, err := r.ingest(lateWrite(t, at)); err == nil {
				t.Fatal("acknowledged by a dead process")
			}
			r.die()
			t.Logf("state file at the crash: floor %v, freed %v, late write at %v", floorIn(t, dir), freedIn(t, dir, key), at)
			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
			r.steps(backoff, nil)
			// The sender re-sends it (or never does).
			r.lateAnnounced(lateWrite(t, at), backoff >= 0, 30, nil)
		})
	}
}

// TestFreed_FreedDoubleAppliedStaysAfterRestart: the defect the change
// exists to fix. Two writes of one edit under two keys, 10 minutes apart:
// the second is double_applied. The partition is freed; at the restart the
// replay reaches back past the second but not the first, judges the second
// alone, and must not store it again as something else.
func TestFreed_FreedDoubleAppliedStaysAfterRestart(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	key := detect.PartitionKey{Server: "thegram"}
	dedit := func(c *detect.Config) { c.CorrelationWindow = 20 * time.Minute }
	r := openRunDetect(t, dir, clock, nil, dedit, nil)
	t1 := clock.Now().Add(-time.Second)
	first := batch(t, "poster", pendingPatchLine("s1", 1, t1, "team/x.gram"))
	if _, err := r.ingest(first); err != nil {
		t.Fatal(err)
	}
	r.steps(20, nil)
	t2 := clock.Now().Add(-time.Second)
	second := batch(t, "poster", pendingPatchLine("s2", 2, t2, "team/x.gram"))
	if _, err := r.ingest(second); err != nil {
		t.Fatal(err)
	}
	r.steps(30, nil)
	freeIdle(t, r, key)
	for deadline := time.Now().Add(hangCeiling); freedIn(t, dir, key).IsZero(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the state file does not keep the freed partition")
		}
		clock.Add(time.Second)
		r.status()
	}
	wm := freedIn(t, dir, key)
	o := r.stop()
	id2 := ids(second)[0]
	state := func(o outcome) string {
		for k, s := range o.writes {
			if len(k) > len(id2) && k[:len(id2)] == id2 {
				return string(s)
			}
		}
		return "none"
	}
	reach := 20*time.Minute + 5*time.Minute + 2*time.Minute + time.Second
	t.Logf("first %v second %v freed wm %v replay from about %v; stored: %s", t1, t2, wm, wm.Add(-reach), state(o))
	if state(o) != "double_applied" {
		t.Fatalf("before the restart the second write is %s, want double_applied", state(o))
	}
	clock.Add(time.Second)
	r = openRunDetect(t, dir, clock, nil, dedit, nil)
	r.steps(20, nil)
	// The server comes back (found from outside, live13b): its first call
	// closed the windows the replay had left open, and their output was
	// announced and stored again.
	back := batch(t, "poster", callLine("thegram", "s5", 500, clock.Now().Add(-time.Second)))
	if _, err := r.ingest(back); err != nil {
		t.Fatal(err)
	}
	r.steps(20, nil)
	logs := r.logs.String()
	r.rec.mu.Lock()
	writes := fmt.Sprint(r.rec.writes)
	again := len(r.rec.writes)
	r.rec.mu.Unlock()
	got := r.stop()
	if s := state(got); s != "double_applied" {
		t.Errorf("after the restart and the server's return the second write is stored as %s, want double_applied\n%s", s, logs)
	}
	if again != 0 {
		t.Errorf("after the restart and the server's return %d write states announced again: %s", again, writes)
	}
}

// TestFreed_StateFileUnwritableLateWriteOfFreedPartition: the state
// file cannot be written (disk full, say) after a partition was freed and
// kept in it. A late write of the partition is acknowledged anyway (the
// ack path's write fails, a WARN), judged in a partition begun anew, and
// the process dies before its window closes. The file still keeps the
// partition as freed: the replay takes the write's unverified_write as
// committed. Without the freed entry (main) it is announced and stored.
func TestFreed_StateFileUnwritableLateWriteOfFreedPartition(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	key := detect.PartitionKey{Server: "thegram"}
	r := openRun(t, dir, clock, nil, nil)
	wm := freedBeforeStop(t, r, dir, clock, key)
	// The file cannot be replaced any more: a directory in its place.
	_, restore := unwritableStateFile(t, dir)
	late := lateWrite(t, wm.Add(-6*time.Minute))
	// The partition cannot leave the file: the call is refused, for the
	// sender to retry, rather than stored under a file that would take its
	// output as committed after a crash.
	// Sent again while the file is still unwritable: refused again (the
	// first refusal must not have left the partition forgotten while the
	// file on disk still keeps it).
	for try := range 2 {
		if _, err := r.ingest(late); !errors.Is(err, audit.ErrUnavailable) {
			t.Fatalf("a call of a freed partition with the state file unwritable, try %d: %v, want refused as unavailable", try+1, err)
		}
	}
	if n := len(r.crash()); n != 1 {
		t.Fatalf("%d findings before the crash, want the first unverified_write", n)
	}
	// What the disk holds: the file as it was before writes failed.
	restore()
	clock.Add(time.Second)
	r = openRun(t, dir, clock, nil, nil)
	r.lateAnnounced(late, true, 20, nil) // the sender retries
}

// TestFreed_StoredNotAckedWithBusyNeighbour: as
// TestFreed_StoredNotAckedLateWriteOfFreedPartition, with another
// server of the tenant busy all along (its watermark, the file's floor,
// after the late write's window end): the floor does not cover the loss.
func TestFreed_StoredNotAckedWithBusyNeighbour(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	key := detect.PartitionKey{Server: "thegram"}
	r := openRun(t, dir, clock, nil, nil)
	rpc := 0
	other := func() {
		t.Helper()
		rpc++
		if _, err := r.ingest(batch(t, "busy", callLine("other", "o1", rpc, clock.Now().Add(-time.Second)))); err != nil {
			t.Fatal(err)
		}
	}
	sendPendingThenReads(t, r, wallStart.Add(-time.Minute))
	r.steps(40, other)
	var wm time.Time
	if !r.stepsUntil(400, other, func() bool { wm = freedIn(t, dir, key); return !wm.IsZero() }) {
		t.Fatalf("the state file does not keep the freed partition after 400 steps (clock %s)", clock.Now())
	}
	at := wm.Add(-6 * time.Minute)
	floor := floorIn(t, dir)
	t.Logf("freed at %v, floor %v, late write at %v (window end %v)", wm, floor, at, at.Add(5*time.Minute))
	if floor.IsZero() || !floor.After(at.Add(5*time.Minute)) {
		t.Fatalf("floor %v not after the late write's window end", floor)
	}
	r.cs.dieAfterAppend.Store(true)
	if _, err := r.ingest(lateWrite(t, at)); err == nil {
		t.Fatal("acknowledged by a dead process")
	}
	r.die()
	clock.Add(time.Second)
	r = openRun(t, dir, clock, nil, nil)
	r.steps(20, other)
	r.lateAnnounced(lateWrite(t, at), true, 30, other) // re-sent after 10 minutes
}
