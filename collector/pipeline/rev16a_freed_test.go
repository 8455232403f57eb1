package pipeline_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRev16a_FreedResentBesideOnTimeCall: in one request with the call of
// the freed partition sent again, a new write of the same partition dated
// now (after the freed watermark): the new write is judged (pending, then
// unverified, one finding), the re-sent one is not, and after a clean
// stop and a third run neither is judged again.
func TestRev16a_FreedResentBesideOnTimeCall(t *testing.T) {
	clock := newClock(wallStart)
	line := pendingPatchLine("s0", 1, wallStart.Add(-time.Minute), "team/x.gram")
	r, before := freedThenRestarted(t, resendCase{}, clock, line)
	old := batch(t, "poster", line)
	fresh := batch(t, "poster", pendingPatchLine("s2", 3, clock.Now().Add(-time.Second), "team/z.gram"))
	req := audit.Batch{Source: "poster", Records: append(old.Records, fresh.Records...)}
	if _, err := r.ingest(req); err != nil {
		t.Fatal(err)
	}
	r.steps(30, nil)
	n, states := announcedWritesOf(r, ids(old)[0])
	nf, freshStates := announcedWritesOf(r, ids(fresh)[0])
	logs := r.logs.String()
	got := r.stop()
	if n != 0 {
		t.Errorf("the re-sent write's states announced again: %s\n%s", states, logs)
	}
	if nf != 2 {
		t.Errorf("the new write's states announced %q, want pending and unverified once each", freshStates)
	}
	if len(got.findings) != len(before)+1 {
		t.Errorf("%d findings stored, want the %d from before and the new write's", len(got.findings), len(before))
	}
	dir := r.dir
	clock.Add(time.Second)
	r = openRun(t, dir, clock, nil, nil)
	r.steps(30, nil)
	n3, states3 := announcedWritesOf(r, ids(old)[0])
	nf3, fresh3 := announcedWritesOf(r, ids(fresh)[0])
	_, announced := r.rec.snapshot()
	logs = r.logs.String()
	third := r.stop()
	if n3 != 0 || nf3 != 0 {
		t.Errorf("third run announced write states again: re-sent %q, new %q\n%s", states3, fresh3, logs)
	}
	for id, c := range announced {
		if c > 0 {
			t.Errorf("third run announced the finding %s %d times", id, c)
		}
	}
	if len(third.findings) != len(got.findings) {
		t.Errorf("third run: %d findings stored, want %d", len(third.findings), len(got.findings))
	}
}

// TestRev16a_FreedResentOtherResponse: the call of the freed partition
// sent again after the restart with another response under the same id
// (an id collision): the store refuses it for its response (differ), so
// it is not passed over as a copy; the collision is counted and logged,
// the stored write and findings stay as they were.
func TestRev16a_FreedResentOtherResponse(t *testing.T) {
	clock := newClock(wallStart)
	line := pendingPatchLine("s0", 1, wallStart.Add(-time.Minute), "team/x.gram")
	r, before := freedThenRestarted(t, resendCase{}, clock, line)
	other := bytes.Replace(line, []byte(`"hash":"bb"`), []byte(`"hash":"cc"`), 1)
	if bytes.Equal(other, line) {
		t.Fatal("the response was not changed: the test shows nothing")
	}
	w := batch(t, "poster", other)
	if _, err := r.ingest(w); err != nil {
		t.Fatal(err)
	}
	r.steps(30, nil)
	ps := r.status()[detect.PartitionKey{Server: "thegram"}]
	n, states := announcedWritesOf(r, ids(w)[0])
	logs := r.logs.String()
	got := r.stop()
	if strings.Contains(logs, "not judged again") {
		t.Errorf("a call with another response was passed over as a copy\n%s", logs)
	}
	if ps.IDCollisions == 0 && !strings.Contains(logs, "kind=id_collision") {
		t.Errorf("the collision is neither counted nor logged (status %+v)\n%s", ps.Counts, logs)
	}
	if n != 0 {
		t.Errorf("write states of the colliding call announced: %s", states)
	}
	if len(got.findings) != len(before) {
		t.Errorf("%d findings stored, want the %d from before", len(got.findings), len(before))
	}
	if s := writeStateOf(got, ids(w)[0]); s != string(audit.StateUnverified) {
		t.Errorf("the write is stored as %s, want unverified", s)
	}
}

// TestRev16a_FreedResentTwiceInOneRequest: the call of the freed partition
// sent again twice in one request (a retrying exporter's batch): both
// copies are passed over, the freed entry is kept again, and a third run
// does not judge the call again.
func TestRev16a_FreedResentTwiceInOneRequest(t *testing.T) {
	clock := newClock(wallStart)
	key := detect.PartitionKey{Server: "thegram"}
	line := pendingPatchLine("s0", 1, wallStart.Add(-time.Minute), "team/x.gram")
	r, before := freedThenRestarted(t, resendCase{}, clock, line)
	w := batch(t, "poster", line, line)
	if _, err := r.ingest(w); err != nil {
		t.Fatal(err)
	}
	r.steps(2, nil)
	at := w.Records[0].Call.Time
	for deadline := time.Now().Add(hangCeiling); ; time.Sleep(10 * time.Millisecond) {
		if wm, floor := freedIn(t, r.dir, key), floorIn(t, r.dir); !wm.IsZero() && (floor.IsZero() || floor.After(at)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the state file does not keep thegram freed again after the call sent twice (freed at %v, floor %v)", freedIn(t, r.dir, key), floorIn(t, r.dir))
		}
		clock.Add(time.Second)
		r.status()
	}
	n, states := announcedWritesOf(r, ids(w)[0])
	dir := r.dir
	r.stop()
	if n != 0 {
		t.Errorf("second run announced write states of the re-sent call: %s", states)
	}
	clock.Add(time.Second)
	r = openRun(t, dir, clock, nil, nil)
	r.steps(30, nil)
	n, states = announcedWritesOf(r, ids(w)[0])
	got := r.stop()
	if n != 0 {
		t.Errorf("third run announced write states of the call: %s", states)
	}
	if len(got.findings) != len(before) {
		t.Errorf("%d findings stored, want the %d from before", len(got.findings), len(before))
	}
}
