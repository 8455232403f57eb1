package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestBoundMemo_SharedSourceHoldExtended (found in review): a source o
// shared by two partitions (no ClockPerPartition), quiet with a
// 30 s lag. Partition a goes quiet; b stays busy, its memo taken after
// o's hold in b ended. A delivery to a ends a's quiet spell: resume(a)
// extends o.holdUntil by the spell and invalidated a's memo only; o then
// held b again, but b's memo still said y. Now resume drops the memo of
// every partition a moved source feeds, and a clock shared by partitions
// keeps no memo at all (TestBoundMemo_Random found another such case).
func TestBoundMemo_SharedSourceHoldExtended(t *testing.T) {
	var diffs []string
	old := memoCheck
	memoCheck = func(k PartitionKey, wall time.Time, diff string) {
		if diff != "" {
			diffs = append(diffs, fmt.Sprintf("%v at %v: %s", k.Server, wall, diff))
		}
		old(k, wall, diff)
	}
	defer func() { memoCheck = old }()
	cfg := NewDefaultConfig()
	cfg.JoinWait = 0
	cfg.MaxClockLag = time.Minute
	e := NewEngine(cfg, countFindings(func() {}))
	rd := dialect.NewReader(dialect.Config{})
	id := 0
	add := func(src, server string, at, wall time.Time) {
		id++
		line := fmt.Appendf(nil, `{"time":%q,"server":%q,"session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"d.gram","rev":4,"hash":"bb"}}}}`,
			at.Format(time.RFC3339Nano), server, id, id, id)
		e.Add(src, leanRecord(t, rd, line), wall)
	}
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for i := range 10 {
		w := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		add("o", "a", w.Add(-30*time.Second), w)
		add("o", "b", w.Add(-30*time.Second), w)
		add("x", "a", w.Add(-500*time.Millisecond), w)
	}
	for i := range 141 { // y on b until t0+70s
		w := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		add("y", "b", w.Add(-500*time.Millisecond), w)
	}
	w := t0.Add(70*time.Second + 200*time.Millisecond)
	add("x", "a", w.Add(-500*time.Millisecond), w) // ends a's quiet spell
	e.Tick(w.Add(100 * time.Millisecond))
	pb := e.parts[PartitionKey{Server: "b"}]
	pb.memo.invalidate()
	wm, h, ahead := e.bound(pb, w.Add(100*time.Millisecond))
	t.Logf("recomputed b: wm %v holder %v ahead %v", wm, nameOf(h), ahead)
	if len(diffs) > 0 {
		t.Errorf("memo differs from recomputation: %s", diffs[0])
	}
}
