package pipeline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

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
	sendPendingThenReads(t, r, wallStart.Add(-time.Minute))
	r.steps(40, nil)
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
		if !strings.Contains(logs, " partitions=0 replayed_calls=0 freed_calls_skipped=11 ") {
			t.Fatalf("restart %d did not pass over the freed partition's 11 calls:\n%s", i+1, logs)
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

// TestRestart_FreedPartitionComesBackAfterRestart: after a restart the
// state file stands for a freed partition's output up to the watermark it
// was freed at as committed (the replay passes over its calls). The
// partition's server comes back with a write dated
// long before that watermark (a late backlog, a poster's clock minutes
// slow): the write's window, closed by the wall clock with no call to
// tell it from a replayed one, ends before the watermark. Its
// unverified_write is new: announced and stored (review12c's D1: the
// gate's freed bounds, removed since, outlived the partition's return and
// suppressed it).
func TestRestart_FreedPartitionComesBackAfterRestart(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	key := detect.PartitionKey{Server: "thegram"}
	r := openRun(t, dir, clock, nil, nil)
	wm := freedBeforeStop(t, r, dir, clock, key)
	r.stop()

	clock.Add(time.Second)
	r = openRun(t, dir, clock, nil, nil)
	clock.Add(3 * time.Second)
	r.status()
	// Its window (5 min) ends a minute before the freed watermark. The
	// first write, passed over by the replay, is not made again: the store
	// holds its finding and the late write's.
	r.lateAnnounced(lateWrite(t, wm.Add(-6*time.Minute)), true, 30, nil)
}

// TestRestart_FreedPartitionComesBackThenCrash: a freed partition comes
// back with a write dated before the watermark it was freed at (another
// partition, behind, holds the file's floor earlier than the write), and
// the collector crashes before the state file is saved again. The file
// was written without the partition before the write was stored
// (comeback), so the replay judges the write again and its
// unverified_write is announced and stored.
func TestRestart_FreedPartitionComesBackThenCrash(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	key := detect.PartitionKey{Server: "thegram"}
	r := openRun(t, dir, clock, nil, nil)
	sendPendingThenReads(t, r, wallStart.Add(-time.Minute))
	// Another server's poster, its clock 15 minutes slow, keeps sending:
	// its partition stays, its watermark (the file's floor) behind.
	rpc := 0
	other := func() {
		t.Helper()
		rpc++
		if _, err := r.ingest(batch(t, "lagging", callLine("other", "o1", rpc, clock.Now().Add(-15*time.Minute)))); err != nil {
			t.Fatal(err)
		}
	}
	r.steps(40, other)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, ok := r.status()[key]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the partition was never freed as idle")
		}
		other()
		clock.Add(30 * time.Second)
	}
	other()
	clock.Add(time.Second) // the file is written at most once a second
	var wm time.Time
	for deadline := time.Now().Add(hangCeiling); wm.IsZero(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the state file does not keep the freed partition")
		}
		wm = freedIn(t, dir, key)
	}
	at := wm.Add(-6 * time.Minute)
	if floor := floorIn(t, dir); floor.IsZero() || !floor.Before(at) {
		t.Fatalf("the state file's floor is %v, want one before the write at %v", floor, at)
	}
	before, err := os.ReadFile(filepath.Join(dir, "partitions.json"))
	if err != nil {
		t.Fatal(err)
	}
	late := lateWrite(t, at)
	if _, err := r.p.Ingest(context.Background(), late); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(filepath.Join(dir, "partitions.json"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(before, after) || !freedIn(t, dir, key).IsZero() {
		t.Error("a call of a freed partition was stored and acknowledged with the state file still keeping the partition as freed")
	}
	if n := len(r.crash()); n != 1 {
		t.Fatalf("%d findings before the crash, want the first unverified_write", n)
	}
	r = openRun(t, dir, clock, nil, nil)
	r.lateAnnounced(late, false, 20, nil)
}

// lateWrite is the late write the freed tests send: a gram_patch of
// thegram left pending, dated at (before the watermark the partition was
// freed at), from a poster whose clock is behind. A fresh batch at each
// call, as a sender's retry is decoded anew.
func lateWrite(t testing.TB, at time.Time) audit.Batch {
	return batch(t, "slowposter", pendingPatchLine("s9", 91, at, "team/y.gram"))
}

// lateAnnounced is how the freed tests end: the sender sends late (when
// send; otherwise an earlier run stored it), the clock moves on by n
// steps of 30 s (each called first at every step, when set), and
// lateFindingAnnounced checks the outcome.
func (r *run) lateAnnounced(late audit.Batch, send bool, n int, each func()) {
	r.t.Helper()
	if send {
		if _, err := r.ingest(late); err != nil {
			r.t.Fatal(err)
		}
	}
	r.steps(n, each)
	lateFindingAnnounced(r.t, r, ids(late)[0])
}

// lateFindingAnnounced stops r and checks that the store holds two
// findings, the first write's and an unverified_write of the late write
// call, and that the run announced the latter.
func lateFindingAnnounced(t testing.TB, r *run, call string) {
	t.Helper()
	_, announced := r.rec.snapshot()
	got := r.stop()
	if len(got.findings) != 2 {
		t.Errorf("%d findings stored, want 2: the first write's and the late write's unverified_write", len(got.findings))
	}
	for id, f := range got.findings {
		if f.Kind == audit.KindUnverifiedWrite && slices.Contains(f.Calls, call) {
			if announced[id] != 1 {
				t.Errorf("the late write's unverified_write was announced %d times, want once", announced[id])
			}
			return
		}
	}
	t.Errorf("no unverified_write of the late write stored (%d announced): taken as committed", len(announced))
}

// freedState is what these tests read of the state file.
type freedState struct {
	Floor time.Time `json:"floor"`
	Freed []struct {
		Tenant, Server string
		Watermark      time.Time
	} `json:"freed"`
}

func readState(t testing.TB, dir string) freedState {
	t.Helper()
	var f freedState
	b, err := os.ReadFile(filepath.Join(dir, "partitions.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// freedIn returns the watermark the state file keeps the partition k
// freed at; zero when it does not keep it.
func freedIn(t *testing.T, dir string, k detect.PartitionKey) time.Time {
	t.Helper()
	for _, l := range readState(t, dir).Freed {
		if l.Tenant == k.Tenant && l.Server == k.Server {
			return l.Watermark
		}
	}
	return time.Time{}
}

// floorIn returns the state file's floor.
func floorIn(t *testing.T, dir string) time.Time { return readState(t, dir).Floor }
