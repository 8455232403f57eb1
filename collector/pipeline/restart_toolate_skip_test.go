package pipeline_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_TooLateCallsNotJudgedByReplay: two calls come later than
// allowed_lateness (their source held back 150 s): a read that shows a
// pending write synced, and a write that timed out. Live, neither is
// judged: the write stays pending until its window ends (unverified), and
// the timed-out write is no write at all. A restart whose replay covers
// them used to judge both: the first write became durable, the second an
// unverified write of its own, so `mcpaudit slo` and the stored states
// changed with a plain restart (adv14's D3). The store now keeps which
// calls came too late, and the replay passes over them: the store holds
// after the restart what the same traffic leaves without one.
func TestRestart_TooLateCallsNotJudgedByReplay(t *testing.T) {
	var wid, fid, logs string
	var p restartPlay
	p.live = func(tr *traffic) {
		write, late := tooLatePairLive(tr, nil)
		wid, fid = ids(write)[0], ids(late)[1]
	}
	p.end = func(r *run) {
		if s := r.stop().writes[wid+"/0"]; s != audit.StatePending {
			t.Fatalf("before the restart the write is %s, want pending", s)
		}
	}
	p.last = func(r *run) { logs = r.logs.String() }
	want := p.play(t, false)
	if s := want.writes[wid+"/0"]; s != audit.StateUnverified {
		t.Fatalf("without a restart the write is %s, want unverified (its read too late)", s)
	}
	if s, ok := want.writes[fid+"/0"]; ok {
		t.Fatalf("without a restart the timed-out write, too late, is stored %s", s)
	}
	got := p.play(t, true)
	sameAfterRestart(t, got, want)
	if !strings.Contains(logs, "too_late_calls_skipped=2") {
		t.Errorf("the restart's log does not say it passed over the 2 calls too late:\n%s", logs)
	}
}

// tooLatePairLive plays, after the traffic's start, a pending write of
// pod-1, then pod-1 held back 150 s with a read that shows the write
// synced and a write of another document that timed out: once delivered
// they are too late. before, when set, is called just before they are
// delivered. Then 20 ticks. It returns the write and the late batch.
func tooLatePairLive(tr *traffic, before func()) (write, late audit.Batch) {
	t, r := tr.t, tr.r
	t.Helper()
	write = tr.send(batch(t, "pod-1", pendingPatchLine("s9", 900, r.clock.Now().Add(-time.Second), "team/x.gram")))
	tr.tick()
	late = batch(t, "pod-1",
		readSyncedLine("s9", 901, r.clock.Now().Add(-time.Second), "team/x.gram"),
		timeoutPatchLine("s8", 902, r.clock.Now().Add(-time.Second), "team/y.gram"))
	tr.ticks(150, "pod-1")
	if before != nil {
		before()
	}
	tr.send(late)
	if st := r.status()[detect.PartitionKey{Server: "thegram"}]; st.TooLate != 2 {
		t.Fatalf("%d calls too late, want the read and the timed-out write (watermark %s, late %d)", st.TooLate, st.Watermark, st.Late)
	}
	tr.ticks(20)
	return write, late
}
