package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestRev20m_FreedDroppedCountsDrops (rev20m, reviewing mem20; clk21): a
// fleet of FreedKept+1 servers, each freed as idle once a cycle, three
// cycles. rev20m found FreedDropped, said to be "how many servers" the
// overflow entry holds, at 2,003: it counts each drop, so a server freed
// again and dropped again counts again. Counting servers once would take
// a set of every server dropped, the memory mem20 bounds; clk21 documents
// it as what it is (docs/api.md, `freed_dropped`; the status says
// "partitions freed ... (a server freed again counts again)"), and this
// pins that meaning: one drop for the first cycle's 1,001st server, then
// each freeing drops the key freed the longest ago, 1,001 a cycle; and
// the calls told under the overflow entry are those of the drops.
func TestRev20m_FreedDroppedCountsDrops(t *testing.T) {
	cfg := NewDefaultConfig()
	e := NewEngine(cfg, countFindings(func() {}))
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	wall := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	const servers, cycles = FreedKept + 1, 3
	id := 0
	for c := range cycles {
		for i := range servers {
			id++
			server := fmt.Sprintf("srv-%04d", i)
			line := fmt.Appendf(nil, `{"time":%q,"server":%q,"session":"s","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"response":{"id":%d,"jsonrpc":"2.0","result":{}}}`,
				wall.Format(time.RFC3339Nano), server, id, id)
			e.Add("otlp:"+server, leanRecord(t, rd, line), wall)
			freed := false
			for range 24 {
				wall = wall.Add(cfg.CorrelationWindow)
				e.Tick(wall)
				if len(e.ExpireIdle(wall, cfg.IdleTimeout)) == 1 {
					freed = true
					break
				}
			}
			if !freed {
				t.Fatalf("cycle %d, server %d: not freed in a day", c, i)
			}
		}
	}
	const drops = 1 + (cycles-1)*servers
	found := false
	for _, f := range e.FreedStatus() {
		if f.Server != OverflowServer {
			continue
		}
		found = true
		if f.FreedDropped != drops || f.Calls != drops {
			t.Errorf("freed_dropped %d, %d calls told together after %d cycles of %d servers; want %d drops, one call each", f.FreedDropped, f.Calls, cycles, servers, drops)
		}
	}
	if !found {
		t.Fatal("no overflow entry")
	}
}
