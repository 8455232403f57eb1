package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestSourceTooFarBehindHoldsNothing: a live pod of thegram delivers on
// time; a second pod joins with its calls 10 minutes behind (its clock or
// its queue), more than the allowance (2 m). Its calls are too late to be
// judged whatever the partition does; it must not also stop the partition,
// or the live pod's calls wait for it and pile up until back-pressure.
func TestSourceTooFarBehindHoldsNothing(t *testing.T) {
	cfg := NewDefaultConfig()
	e := NewEngine(cfg)
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	read := func(at time.Time, id int) []byte {
		return fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false}}}`,
			at.Format(time.RFC3339Nano), id%7, id, id)
	}
	wall := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	id := 0
	for i := range 300 {
		id++
		e.Add("pod-0", leanRecord(t, rd, read(wall.Add(-time.Second), id)), wall)
		if i >= 60 {
			id++
			e.Add("pod-1", leanRecord(t, rd, read(wall.Add(-10*time.Minute), id)), wall)
		}
		wall = wall.Add(time.Second)
		e.Tick(wall)
	}
	st := e.Status(wall)[0]
	if st.Buffered > 10 {
		t.Errorf("%d calls wait for the watermark, which is %s behind the wall clock: the source 10 minutes behind holds the partition", st.Buffered, wall.Sub(st.Watermark))
	}
	if st.TooLate != 240 {
		t.Errorf("%d calls too late, want the 240 of the source 10 minutes behind", st.TooLate)
	}
}

// TestStatus_HeldByLeavesOutSourceTooFarBehind: the status names as the
// source a partition waits for (held_by) the one its watermark follows,
// not a pod 2 hours behind (a slow clock) whose calls are too late and
// which holds nothing back. Found from outside: `mcpaudit status` showed
// HELD BY otlp:thegram/slow2h while the watermark followed the on-time pod,
// pointing the operator at the wrong source.
func TestStatus_HeldByLeavesOutSourceTooFarBehind(t *testing.T) {
	e := NewEngine(NewDefaultConfig())
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	read := func(at time.Time, id int) []byte {
		return fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false}}}`,
			at.Format(time.RFC3339Nano), id%7, id, id)
	}
	wall := time.Date(2026, 12, 4, 14, 33, 40, 0, time.UTC)
	id := 0
	heldBy := func() string { return e.Status(wall)[0].HeldBy }
	for i := range 60 {
		id++
		e.Add("otlp:thegram/on-time", leanRecord(t, rd, read(wall.Add(-time.Second), id)), wall)
		if i >= 30 {
			id++
			e.Add("otlp:thegram/slow2h", leanRecord(t, rd, read(wall.Add(-2*time.Hour), id)), wall)
		}
		wall = wall.Add(time.Second)
		e.Tick(wall)
		if i == 20 {
			if got := heldBy(); got != "otlp:thegram/on-time" {
				t.Fatalf("held_by %q with one source, want otlp:thegram/on-time", got)
			}
		}
	}
	if got := heldBy(); got != "otlp:thegram/on-time" {
		t.Errorf("held_by %q, want otlp:thegram/on-time: the source 2 h behind holds nothing back", got)
	}
	// Both quiet: nothing holds the partition.
	wall = wall.Add(time.Minute)
	e.Tick(wall)
	if got := heldBy(); got != "" {
		t.Errorf("held_by %q with every source idle, want none", got)
	}
}
