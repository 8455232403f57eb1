package detect_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestStatus_NonePendingIsNotFinal: mcpaudit status says, when no judged
// write is pending, "each is in a terminal state". A write judged durable
// still changes state when a late call (within allowed_lateness) shows it
// was the second application of an edit: the count of pending writes says
// 0 while a judged write's state is still to change. The test shows the
// change; the line that calls the states terminal is what it questions.
func TestStatus_NonePendingIsNotFinal(t *testing.T) {
	patch := func(rpc int, at time.Time) []byte {
		return fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s0","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"a.gram","base_revision":3,"expected_hash":"aa","request_id":"req-%d","operations":[{"op":"append_block","target":"h1","text":"x"}]}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"a.gram","rev":4,"hash":"bb","replayed":false,"request_id":"req-%d"}}}}`,
			at.Format(time.RFC3339Nano), rpc, rpc, rpc, rpc)
	}
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	sink := pendingSink{writes: map[string]audit.Write{}}
	e := detect.NewEngine(detect.NewDefaultConfig(), sink)
	recs := readRecords(t, [][]byte{patch(2, t0.Add(10*time.Second)), patch(1, t0)})
	wall := t0.Add(20 * time.Second)
	e.Add("pod-a", recs[0], wall)
	for range 30 {
		wall = wall.Add(time.Second)
		e.Tick(wall)
	}
	states := func() map[string]audit.WriteState {
		m := map[string]audit.WriteState{}
		for k, w := range sink.writes {
			m[k] = w.State
		}
		return m
	}
	before := states()
	pending := 0
	for _, ps := range e.Status(wall) {
		pending += ps.Pending
	}
	if pending != 0 || len(before) != 1 {
		t.Fatalf("before the late call: %d pending, states %v", pending, before)
	}
	e.Add("pod-b", recs[1], wall) // late, within allowed_lateness
	e.Tick(wall)
	for k, s := range before {
		if got := sink.writes[k].State; got != s {
			t.Errorf("write %s, judged %s with none pending (\"each is in a terminal state\"), is now %s", k, s, got)
		}
	}
}
