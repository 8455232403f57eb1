package pipeline_test

import (
	"fmt"
	"maps"
	"testing"
	"time"
)

// timeoutPatchLine is a gram_patch that saw no response (a timeout): an
// uncertain write, unverified when nobody reads the target within its
// window.
func timeoutPatchLine(session string, rpc int, t time.Time, path string) []byte {
	return fmt.Appendf(nil, `{"time":%q,"duration_ms":30000,"server":"thegram","session":%q,"request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_patch","arguments":{"path":%q,"base_revision":3,"expected_hash":"aa","request_id":"req-%d","operations":[{"op":"append_block","target":"h1","text":"x"}]}}},"transport_error":"timeout"}`,
		t.Format(time.RFC3339Nano), session, rpc, path, rpc)
}

// TestRestart_TwoLateObservations: one exchange (a timed-out write) is
// observed by two observers whose clocks differ by 300 ms, both
// delivering it behind the watermark, the later-dated observation first.
// Live, the one that arrives first stands for the call and the
// unverified_write cites it, and the write is stored under it. A restart
// replays both in time order; it must not store a second unverified_write
// for the same write, citing the other observation, nor a second row of
// the write under the other observation (the write would count twice in
// the SLO).
func TestRestart_TwoLateObservations(t *testing.T) {
	// The restart comes when the window closed long before the stop (its
	// output is older than the mark less the allowance), or just before.
	for _, steps := range []int{600, 330} {
		t.Run(fmt.Sprintf("stop_%ds_after", steps), func(t *testing.T) { twoLateObservations(t, steps) })
	}
}

func twoLateObservations(t *testing.T, steps int) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	T := wallStart.Add(5 * time.Second)
	rpc := 0
	for i := range steps {
		rpc++
		if _, err := r.ingest(batch(t, "main", callLine("thegram", "s0", rpc, clock.Now().Add(-time.Second)))); err != nil {
			t.Fatal(err)
		}
		if i == 20 {
			if _, err := r.ingest(batch(t, "observer-b", timeoutPatchLine("s1", 7, T.Add(300*time.Millisecond), "team/x.gram"))); err != nil {
				t.Fatal(err)
			}
			if _, err := r.ingest(batch(t, "observer-a", timeoutPatchLine("s1", 7, T, "team/x.gram"))); err != nil {
				t.Fatal(err)
			}
		}
		clock.Add(time.Second)
	}
	o := r.stop()
	if len(o.findings) != 1 {
		t.Fatalf("%d findings before the restart, want the unverified_write", len(o.findings))
	}
	for _, f := range o.findings {
		t.Logf("before: %s %v", f.Kind, f.Calls)
	}
	clock.Add(time.Second)
	r = openRun(t, dir, clock, nil, nil)
	clock.Add(3 * time.Second)
	r.status()
	got := r.stop()
	if !maps.Equal(got.writes, o.writes) {
		t.Errorf("write rows after the restart %v, want those before %v", got.writes, o.writes)
	}
	for id, f := range got.findings {
		if _, ok := o.findings[id]; !ok {
			t.Errorf("after the restart a new finding: %s %v", f.Kind, f.Calls)
		}
	}
}
