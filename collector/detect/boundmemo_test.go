package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestBoundMemo_QuietSourceHeldAgain: a quiet pod whose clock is 125 s
// slow is not held while the watermark moves with the others (its clock
// is further behind it than the allowed lateness), but is held again once
// the watermark stalls, its holder active and silent, for as long as the
// wall clock takes to bring its clock within the allowance. A memo of
// the bound taken while another source delivers must end then (heldFrom):
// TestMain computes each bound taken from a memo again.
func TestBoundMemo_QuietSourceHeldAgain(t *testing.T) {
	cfg := NewDefaultConfig()
	cfg.JoinWait = 0
	e := NewEngine(cfg, countFindings(func() {}))
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	id := 0
	add := func(src string, at, wall time.Time) {
		id++
		line := fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"d.gram","rev":4,"hash":"bb"}}}}`,
			at.Format(time.RFC3339Nano), id, id, id)
		e.Add(src, leanRecord(t, rd, line), wall)
	}
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	// The holder and a faster source deliver; the slow pod joins 125 s
	// behind them, too far behind to hold anything, and goes quiet.
	for i := range 40 {
		w := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		add("holder", w.Add(-time.Second), w)
		add("fast", w.Add(-500*time.Millisecond), w)
		if i >= 10 && i < 16 {
			add("slow", w.Add(-125*time.Second), w)
		}
	}
	// The holder, still active, stops delivering; the fast one goes on.
	for i := range 20 {
		w := t0.Add(20*time.Second + time.Duration(i)*500*time.Millisecond)
		add("fast", w.Add(-500*time.Millisecond), w)
	}
	p := e.parts[PartitionKey{Server: "thegram"}]
	if h, _ := e.holder(p, t0.Add(29*time.Second)); h == nil || h.key.name != "slow" {
		t.Errorf("held by %v; want the slow pod, held again once its clock came within the allowance", nameOf(h))
	}
}
