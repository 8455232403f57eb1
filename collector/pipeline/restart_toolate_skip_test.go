package pipeline_test

import (
	"context"
	"maps"
	"slices"
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
	type result struct {
		writes   map[string]audit.WriteState
		findings []string
		counts   map[audit.WriteState]int64
		causes   []audit.CauseCount
		logs     string
		wid, fid string
	}
	play := func(t *testing.T, restart bool) result {
		dir := t.TempDir()
		clock := newClock(wallStart)
		r := openRun(t, dir, clock, nil, nil)
		rpc := 0
		tick := func(pod1 bool) {
			now := clock.Now()
			rpc++
			if _, err := r.ingest(batch(t, "pod-0", callLine("thegram", "s0", rpc, now.Add(-time.Second)))); err != nil {
				t.Fatal(err)
			}
			if pod1 {
				rpc++
				if _, err := r.ingest(batch(t, "pod-1", callLine("thegram", "s1", rpc, now.Add(-time.Second)))); err != nil {
					t.Fatal(err)
				}
			}
			clock.Add(time.Second)
		}
		for range 20 {
			tick(true)
		}
		tw := clock.Now().Add(-time.Second)
		write := batch(t, "pod-1", pendingPatchLine("s9", 900, tw, "team/x.gram"))
		if _, err := r.ingest(write); err != nil {
			t.Fatal(err)
		}
		tick(true)
		// pod-1's read of the document, synced, and a write of another
		// document that timed out, held back with pod-1 for 150 s: once
		// delivered they are too late.
		late := batch(t, "pod-1",
			readSyncedLine("s9", 901, clock.Now().Add(-time.Second), "team/x.gram"),
			timeoutPatchLine("s8", 902, clock.Now().Add(-time.Second), "team/y.gram"))
		for range 150 {
			tick(false)
		}
		if _, err := r.ingest(late); err != nil {
			t.Fatal(err)
		}
		if st := r.status()[detect.PartitionKey{Server: "thegram"}]; st.TooLate != 2 {
			t.Fatalf("%d calls too late, want the read and the timed-out write (watermark %s, late %d)", st.TooLate, st.Watermark, st.Late)
		}
		for range 20 {
			tick(true)
		}
		if restart {
			before := r.stop()
			if s := before.writes[ids(write)[0]+"/0"]; s != audit.StatePending {
				t.Fatalf("before the restart the write is %s, want pending", s)
			}
			clock.Add(time.Second)
			r = openRun(t, dir, clock, nil, nil)
		}
		// Past the windows (5 m) of both writes and the lateness bounds.
		for range 400 {
			tick(true)
		}
		ctx := context.Background()
		counts, err := r.store.WriteCounts(ctx, audit.CountQuery{})
		if err != nil {
			t.Fatal(err)
		}
		bad, err := r.store.BadWriteCounts(ctx, audit.BadWriteQuery{})
		if err != nil {
			t.Fatal(err)
		}
		logs := r.logs.String()
		o := r.stop()
		return result{writes: o.writes, findings: slices.Sorted(maps.Keys(o.findings)), counts: counts, causes: bad.Causes,
			logs: logs, wid: ids(write)[0], fid: ids(late)[1]}
	}
	want := play(t, false)
	if s := want.writes[want.wid+"/0"]; s != audit.StateUnverified {
		t.Fatalf("without a restart the write is %s, want unverified (its read too late)", s)
	}
	if s, ok := want.writes[want.fid+"/0"]; ok {
		t.Fatalf("without a restart the timed-out write, too late, is stored %s", s)
	}
	got := play(t, true)
	if !maps.Equal(got.writes, want.writes) {
		t.Errorf("write states after a restart %v, without one %v", got.writes, want.writes)
	}
	if !slices.Equal(got.findings, want.findings) {
		t.Errorf("findings after a restart %v, without one %v", got.findings, want.findings)
	}
	if !maps.Equal(got.counts, want.counts) {
		t.Errorf("write counts (the SLO's) after a restart %v, without one %v", got.counts, want.counts)
	}
	if !slices.Equal(got.causes, want.causes) {
		t.Errorf("bad writes by cause after a restart %v, without one %v", got.causes, want.causes)
	}
	if !strings.Contains(got.logs, "too_late_calls_skipped=2") {
		t.Errorf("the restart's log does not say it passed over the 2 calls too late:\n%s", got.logs)
	}
}
