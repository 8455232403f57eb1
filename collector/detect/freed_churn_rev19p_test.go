package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestFreedStatus_BoundedUnderSourceChurn (rev19p, against px19): what
// FreedStatus keeps of a key stays bounded by Config.MaxSources, however
// many sources its freed partitions had over time. A server whose pods
// each come with a source of their own (each rolling deploy its own
// service.instance.id) and whose partition is freed between deploys would
// otherwise grow the engine's memory, each status's clone and the
// status's Sources list by one source per pod, for as long as the
// collector runs: forgetQuiet bounds a live partition's sources for that
// very reason, and MaxSources a partition's.
func TestFreedStatus_BoundedUnderSourceChurn(t *testing.T) {
	cfg := NewDefaultConfig()
	cfg.MaxSources = 3
	e := NewEngine(cfg, countFindings(func() {}))
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	t0 := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	const pods = 40
	var calls int64
	wall := t0
	for i := range pods {
		line := fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"response":{"id":%d,"jsonrpc":"2.0","result":{}}}`,
			wall.Format(time.RFC3339Nano), i, i)
		e.Add(fmt.Sprintf("otlp:thegram/pod-%d/node-1", i), leanRecord(t, rd, line), wall)
		calls++
		// Quiet long enough for the partition to be judged out and freed.
		for range 3 {
			wall = wall.Add(cfg.CorrelationWindow)
			e.Tick(wall)
		}
		if got := len(e.ExpireIdle(wall, cfg.IdleTimeout)); got != 1 {
			t.Fatalf("pod %d: %d partitions freed; want 1", i, got)
		}
	}
	freed := e.FreedStatus()
	if len(freed) != 1 {
		t.Fatalf("FreedStatus: %d keys; want 1", len(freed))
	}
	if got := freed[0].Calls; got != calls {
		t.Errorf("freed calls %d; want %d", got, calls)
	}
	if n := len(freed[0].Sources); n > cfg.MaxSources+1 {
		t.Errorf("FreedStatus keeps %d sources of one key after %d pods; want at most max_sources (%d) and the overflow source", n, pods, cfg.MaxSources)
	}
	var sum int64
	for _, s := range freed[0].Sources {
		sum += s.Calls
	}
	if sum != calls {
		t.Errorf("the kept sources count %d calls; want all %d", sum, calls)
	}
}
