package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestStatus_RestartHold: while a partition's watermark is held after a
// restart (HoldAfterRestart), its status tells until when and at which
// event time, so that an operator who sees its calls wait knows why; once
// the hold is over, or for a partition never held, it tells nothing.
// Found from outside: for the ~3 minutes after a restart, `mcpaudit
// status` showed calls waiting and "judged: no" with no reason, the hold
// told only by one start-up log line.
func TestStatus_RestartHold(t *testing.T) {
	cfg := NewDefaultConfig()
	e := NewEngine(cfg)
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	read := func(server string, at time.Time, id int) []byte {
		return fmt.Appendf(nil, `{"time":%q,"server":%q,"session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false}}}`,
			at.Format(time.RFC3339Nano), server, id%7, id, id)
	}
	wall := time.Date(2026, 12, 4, 15, 40, 0, 0, time.UTC)
	id := 0
	live := func(n int) {
		for range n {
			for _, server := range []string{"thegram", "oddlynew"} {
				id++
				e.Add("pod-"+server, leanRecord(t, rd, read(server, wall.Add(-time.Second), id)), wall)
			}
			wall = wall.Add(time.Second)
			e.Tick(wall)
		}
	}
	live(60)
	// thegram's pod had delivered up to at when serve stopped; the hold
	// lasts 3 m 10 s (restart_grace_max + idle_timeout) from the restart.
	thegram, oddlynew := PartitionKey{Server: "thegram"}, PartitionKey{Server: "oddlynew"}
	at := wall.Add(-time.Second)
	until := wall.Add(3*time.Minute + 10*time.Second)
	e.HoldAfterRestart(thegram, at, until)
	status := func() map[PartitionKey]PartitionStatus {
		m := map[PartitionKey]PartitionStatus{}
		for _, ps := range e.Status(wall) {
			m[ps.PartitionKey] = ps
		}
		return m
	}
	live(90)
	st := status()
	held, free := st[thegram], st[oddlynew]
	if !held.HeldUntil.Equal(until) || !held.HeldAt.Equal(at.Add(-cfg.Lateness)) {
		t.Errorf("during the hold: held until %s at %s, want until %s at %s", held.HeldUntil, held.HeldAt, until, at.Add(-cfg.Lateness))
	}
	if held.Watermark.After(held.HeldAt) || held.Buffered < 80 {
		t.Fatalf("the hold is not in force: watermark %s (held at %s), %d calls waiting", held.Watermark, held.HeldAt, held.Buffered)
	}
	if !free.HeldUntil.IsZero() || !free.HeldAt.IsZero() {
		t.Errorf("a partition never held: held until %s at %s, want neither", free.HeldUntil, free.HeldAt)
	}
	live(int(until.Sub(wall)/time.Second) - 1)
	if st := status()[thegram]; !st.HeldUntil.Equal(until) {
		t.Errorf("a second before the hold's end: held until %s, want %s", st.HeldUntil, until)
	}
	live(1)
	st = status()
	if got := st[thegram]; !got.HeldUntil.IsZero() || !got.HeldAt.IsZero() {
		t.Errorf("at the hold's end (%s): held until %s at %s, want neither", wall, got.HeldUntil, got.HeldAt)
	}
	if got := st[thegram]; got.Watermark.Before(at) || got.Buffered > 10 {
		t.Errorf("after the hold: watermark %s, %d calls waiting: the calls held were not judged", got.Watermark, got.Buffered)
	}
}
