package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// podFeed delivers reads of thegram to an engine with a clock per
// partition, as the pods of a server deliver them, each call its own.
type podFeed struct {
	t  *testing.T
	e  *Engine
	rd *dialect.Reader
	id int
}

func newPodFeed(t *testing.T) *podFeed {
	e := NewEngine(NewDefaultConfig())
	e.ClockPerPartition()
	return &podFeed{t: t, e: e, rd: dialect.NewReader(dialect.Config{})}
}

// add delivers from source src, at wall time wall, one call dated at.
func (f *podFeed) add(src string, at, wall time.Time) {
	f.id++
	b := fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false}}}`,
		at.Format(time.RFC3339Nano), f.id%7, f.id, f.id)
	f.e.Add(src, leanRecord(f.t, f.rd, b), wall)
}

// TestSourceTooFarBehindHoldsNothing: a live pod of thegram delivers on
// time; a second pod joins with its calls 10 minutes behind (its clock or
// its queue), more than the allowance (2 m). Its calls are too late to be
// judged whatever the partition does; it must not also stop the partition,
// or the live pod's calls wait for it and pile up until back-pressure.
func TestSourceTooFarBehindHoldsNothing(t *testing.T) {
	f := newPodFeed(t)
	e := f.e
	wall := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	for i := range 300 {
		f.add("pod-0", wall.Add(-time.Second), wall)
		if i >= 60 {
			f.add("pod-1", wall.Add(-10*time.Minute), wall)
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
	f := newPodFeed(t)
	e := f.e
	wall := time.Date(2026, 12, 4, 14, 33, 40, 0, time.UTC)
	heldBy := func() string { return e.Status(wall)[0].HeldBy }
	for i := range 60 {
		f.add("otlp:thegram/on-time", wall.Add(-time.Second), wall)
		if i >= 30 {
			f.add("otlp:thegram/slow2h", wall.Add(-2*time.Hour), wall)
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

// TestWrongClockFromTheStart: a pod whose clock is 2 h slow, delivering
// from the partition's first second beside an on-time pod, holds nothing
// back: the on-time pod's calls are judged as they come, the slow pod's are
// counted too late, as they are when it joins later. Before, the partition
// followed the slow pod, and every call of the server waited 2 h.
func TestWrongClockFromTheStart(t *testing.T) {
	f := newPodFeed(t)
	e := f.e
	wall := time.Date(2026, 12, 4, 15, 30, 0, 0, time.UTC)
	for range 60 {
		// The slow pod first: the partition is born on its clock.
		f.add("otlp:thegram/slow2h", wall.Add(-2*time.Hour), wall)
		f.add("otlp:thegram/on-time", wall.Add(-time.Second), wall)
		wall = wall.Add(time.Second)
		e.Tick(wall)
	}
	ps := e.Status(wall)[0]
	if ps.Lag > 10*time.Second {
		t.Errorf("watermark %s behind the wall clock, want the on-time pod's (seconds): the slow pod holds the partition", ps.Lag)
	}
	if ps.HeldBy != "otlp:thegram/on-time" {
		t.Errorf("held_by %q, want otlp:thegram/on-time", ps.HeldBy)
	}
	if ps.Buffered > 5 {
		t.Errorf("%d calls waiting, want the on-time pod's judged as they come", ps.Buffered)
	}
	var slow SourceStatus
	for _, s := range ps.Sources {
		if s.Name == "otlp:thegram/slow2h" {
			slow = s
		}
	}
	if slow.TooLate < 50 {
		t.Errorf("%d of the slow pod's 60 calls counted too late, want all but those before the partition's first watermark", slow.TooLate)
	}
}

// TestOldBacklogsHoldWithoutCurrentSource: sources that all deliver calls
// from long ago (backlogs replayed to a collector started late, a capture
// posted) hold their partition as always: none is current, so none is
// taken for a wrong clock, and the earliest holds the watermark.
func TestOldBacklogsHoldWithoutCurrentSource(t *testing.T) {
	f := newPodFeed(t)
	e := f.e
	wall := time.Date(2026, 12, 4, 15, 30, 0, 0, time.UTC)
	for i := range 60 {
		f.add("otlp:thegram/pod-a", wall.Add(-3*time.Hour+time.Duration(i)*time.Second), wall)
		f.add("otlp:thegram/pod-b", wall.Add(-time.Hour+time.Duration(i)*time.Second), wall)
		wall = wall.Add(time.Second)
		e.Tick(wall)
	}
	ps := e.Status(wall)[0]
	if ps.HeldBy != "otlp:thegram/pod-a" {
		t.Errorf("held_by %q, want otlp:thegram/pod-a, the earliest backlog", ps.HeldBy)
	}
	for _, s := range ps.Sources {
		if s.TooLate != 0 {
			t.Errorf("%s: %d calls too late, want none", s.Name, s.TooLate)
		}
	}
}

// TestTooLateBehindTellsSlowClockFromBacklog: of the calls counted too
// late, those of a source that never delivered a call dated within
// max_clock_lag of its arrival (a pod whose clock is 2 h slow) are counted
// as behind; those of a source once current (a pod that delivered on time,
// then a backlog 20 minutes old) are not: its clock is right, its delivery
// late.
func TestTooLateBehindTellsSlowClockFromBacklog(t *testing.T) {
	f := newPodFeed(t)
	e := f.e
	wall := time.Date(2026, 12, 5, 21, 0, 0, 0, time.UTC)
	for i := range 90 {
		f.add("otlp:thegram/on-time", wall.Add(-time.Second), wall)
		if i >= 30 {
			f.add("otlp:thegram/slow2h", wall.Add(-2*time.Hour), wall)
		}
		switch {
		case i < 20:
			f.add("otlp:thegram/backlog", wall.Add(-time.Second), wall)
		case i >= 60:
			f.add("otlp:thegram/backlog", wall.Add(-20*time.Minute), wall)
		}
		wall = wall.Add(time.Second)
		e.Tick(wall)
	}
	ps := e.Status(wall)[0]
	src := map[string]SourceStatus{}
	for _, s := range ps.Sources {
		src[s.Name] = s
	}
	slow, backlog := src["otlp:thegram/slow2h"], src["otlp:thegram/backlog"]
	if slow.TooLate != 60 || slow.Behind != 60 {
		t.Errorf("slow pod: %d too late, %d behind; want its 60 calls both", slow.TooLate, slow.Behind)
	}
	if backlog.TooLate != 30 || backlog.Behind != 0 {
		t.Errorf("backlog pod: %d too late, %d behind; want its 30 late calls too late and none behind", backlog.TooLate, backlog.Behind)
	}
	if ps.TooLate != 90 || ps.Behind != 60 {
		t.Errorf("partition: %d too late, %d behind; want 90 and 60", ps.TooLate, ps.Behind)
	}
}
