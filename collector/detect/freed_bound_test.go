package detect

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestFreedStatus_BoundedUnderServerChurn (mem20, rev19p's A against
// px19): FreedStatus keeps at most FreedKept keys, however many servers
// were freed as idle. A fleet whose servers come and go (a server name per
// deployment, per request) kept one entry more per server for as long as
// the collector ran, in memory and in each status. Past the bound, the
// keys freed the longest ago are dropped, their counts kept together in
// their tenant's OverflowServer entry, which says how many they are: the
// kept keys' counts stay right, and the totals stay what the metrics
// count.
func TestFreedStatus_BoundedUnderServerChurn(t *testing.T) {
	cfg := NewDefaultConfig()
	e := NewEngine(cfg, countFindings(func() {}))
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	t0 := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	const servers, dropped = FreedKept + 300, 300
	id := 0
	add := func(server string, at, wall time.Time) {
		id++
		line := fmt.Appendf(nil, `{"time":%q,"server":%q,"session":"s","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"response":{"id":%d,"jsonrpc":"2.0","result":{}}}`,
			at.Format(time.RFC3339Nano), server, id, id)
		e.Add("otlp:"+server+"/pod/node", leanRecord(t, rd, line), wall)
	}
	wall := t0
	// free waits, an hour at a time, until the partition is freed: its
	// source, having delivered hours behind, holds it at that lag a while.
	free := func(i int) {
		t.Helper()
		for range 24 {
			wall = wall.Add(cfg.CorrelationWindow)
			e.Tick(wall)
			if n := len(e.ExpireIdle(wall, cfg.IdleTimeout)); n == 1 {
				return
			}
		}
		t.Fatalf("server %d: not freed in a day", i)
	}
	for i := range servers {
		server := fmt.Sprintf("srv-%04d", i)
		first := wall
		add(server, first, wall)
		for range 3 {
			wall = wall.Add(cfg.CorrelationWindow)
			e.Tick(wall)
		}
		// Dated at the first call, hours behind the watermark: too late.
		add(server, first, wall)
		free(i)
	}
	freed := e.FreedStatus()
	if len(freed) != FreedKept+1 {
		t.Fatalf("FreedStatus keeps %d entries after %d servers freed; want FreedKept (%d) and one overflow entry", len(freed), servers, FreedKept)
	}
	var tooLate int64
	kept := 0
	for _, f := range freed {
		tooLate += f.TooLate
		if f.Server == OverflowServer {
			if f.FreedDropped != dropped || f.TooLate != dropped || f.Calls != 2*dropped {
				t.Errorf("%s: %d servers dropped, %d calls, %d too late; want %d servers, %d calls, %d too late",
					f.Server, f.FreedDropped, f.Calls, f.TooLate, dropped, 2*dropped, dropped)
			}
			if len(f.Sources) > cfg.MaxSources+1 {
				t.Errorf("the overflow entry keeps %d sources; want at most max_sources and the overflow source", len(f.Sources))
			}
			continue
		}
		// The servers freed latest are kept, one by one.
		if want := fmt.Sprintf("srv-%04d", dropped+kept); f.Server != want || f.TooLate != 1 || f.Calls != 2 || f.FreedDropped != 0 {
			t.Errorf("entry %d: %s, %d calls, %d too late, %d dropped; want %s, 2 calls, 1 too late", kept, f.Server, f.Calls, f.TooLate, f.FreedDropped, want)
		}
		kept++
	}
	if kept != FreedKept {
		t.Errorf("%d servers kept one by one; want %d", kept, FreedKept)
	}
	if st := e.Stats(); tooLate != servers || st.TooLate != servers {
		t.Errorf("too late over FreedStatus %d, engine %d; want %d", tooLate, st.TooLate, servers)
	}
	// A server freed again after it was dropped is told one by one
	// again, from its new freeing; its older counts stay in the overflow
	// entry.
	add("srv-0000", wall, wall)
	free(servers)
	freed = e.FreedStatus()
	i := slices.IndexFunc(freed, func(f PartitionStatus) bool { return f.Server == "srv-0000" })
	o := slices.IndexFunc(freed, func(f PartitionStatus) bool { return f.Server == OverflowServer })
	if len(freed) != FreedKept+1 || i < 0 || freed[i].Calls != 1 || o < 0 || freed[o].FreedDropped != dropped+1 {
		t.Errorf("after srv-0000 is freed again: %d entries, srv-0000 at %d, overflow at %d; want %d, srv-0000 with 1 call, %d dropped",
			len(freed), i, o, FreedKept+1, dropped+1)
	}
	if n := len(e.freedOrder); n > 2*FreedKept+16 {
		t.Errorf("the freeing order holds %d places; want at most %d", n, 2*FreedKept+16)
	}
}
