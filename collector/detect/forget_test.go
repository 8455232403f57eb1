package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestExpireIdle_ForgetsLongQuietSources: a server whose traffic never
// stops keeps its partition for as long as the collector runs, while its
// exporters come and go (each pod of a rolling deploy its own
// service.instance.id, here one every 10 minutes). The sources quiet for
// longer than the correlation window plus the allowed lateness are
// forgotten; the others, and the findings, stay. Before, every source the
// partition ever had stayed in it (found from outside: 4,000 poster names
// kept in one partition, every call going over all of them).
func TestExpireIdle_ForgetsLongQuietSources(t *testing.T) {
	cfg := NewDefaultConfig()
	e := NewEngine(cfg, countFindings(func() {}))
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	id := 0
	read := func(at time.Time) []byte {
		id++
		return fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d/%d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"d/%d.gram","rev":4,"hash":"bb"}}}}`,
			at.Format(time.RFC3339Nano), id, id, id%7, id, id%7)
	}
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	end := t0.Add(3 * time.Hour)
	pods := 0
	for wall := t0; wall.Before(end); wall = wall.Add(10 * time.Second) {
		e.Add("steady", leanRecord(t, rd, read(wall.Add(-200*time.Millisecond))), wall)
		if wall.Sub(t0)%(10*time.Minute) == 0 {
			pods++
			e.Add(fmt.Sprintf("pod-%d", pods), leanRecord(t, rd, read(wall.Add(-100*time.Millisecond))), wall)
		}
		e.Tick(wall)
		e.ExpireIdle(wall, time.Minute)
	}
	p := e.parts[PartitionKey{Server: "thegram"}]
	if p == nil {
		t.Fatal("the partition of a server with steady traffic was removed")
	}
	// The pods of the last correlation window plus allowed lateness
	// (1h02m: 6 of them) and the steady source.
	if n, want := len(p.sources), 1+6; n != want {
		t.Errorf("after 3 h the partition holds %d sources; want %d: the steady one and the pods of the last %v", n, want, cfg.horizon())
	}
	if n := len(e.sources); n != len(p.sources) {
		t.Errorf("the engine holds %d sources, its only partition %d", n, len(p.sources))
	}
	var listed int
	for _, ps := range e.Status(end) {
		listed += len(ps.Sources)
	}
	if listed != len(p.sources) {
		t.Errorf("the status lists %d sources; want %d", listed, len(p.sources))
	}
	if got := p.Counts.Calls; got != int64(id) {
		t.Errorf("the partition counts %d calls; want every one delivered, %d", got, id)
	}
	// A forgotten pod that delivers again is a source again, on time.
	wall := end
	e.Add("pod-1", leanRecord(t, rd, read(wall.Add(-100*time.Millisecond))), wall)
	e.Tick(wall)
	if n := len(p.sources); n != 1+6+1 {
		t.Errorf("a forgotten pod back: %d sources; want 8", n)
	}
	if tooLate := p.Counts.TooLate; tooLate != 0 {
		t.Errorf("%d calls too late; want none", tooLate)
	}
}

// TestForgetQuiet_WatermarkGoesOn: once every source of a partition that
// still holds state is forgotten, its watermark goes on with the wall
// clock from the latest of their quiet clocks, as it did while they were
// kept: windows still close.
func TestForgetQuiet_WatermarkGoesOn(t *testing.T) {
	f := func(forget bool) time.Time {
		// No hold at a learned lag (max_clock_lag 0): a source that still
		// holds so is not forgotten (TestQuietSlowSourceHoldsBesideAheadSource),
		// and in a quiet spell of the whole partition its hold does not run
		// out.
		cfg := NewDefaultConfig()
		cfg.MaxClockLag = 0
		e := NewEngine(cfg, countFindings(func() {}))
		e.ClockPerPartition()
		rd := dialect.NewReader(dialect.Config{})
		t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
		for i, src := range []string{"a", "b"} {
			at := t0.Add(time.Duration(i) * time.Minute)
			line := fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"d.gram","rev":4,"hash":"bb"}}}}`,
				at.Format(time.RFC3339Nano), i, i)
			e.Add(src, leanRecord(t, rd, line), at)
		}
		p := e.parts[PartitionKey{Server: "thegram"}]
		wall := t0.Add(10 * time.Minute)
		if forget {
			e.forgetQuiet(p, wall, time.Minute)
			if len(p.sources) != 0 {
				t.Fatalf("%d sources left; want none", len(p.sources))
			}
		}
		e.Tick(wall.Add(5 * time.Minute))
		return p.wm
	}
	kept, forgotten := f(false), f(true)
	if !forgotten.Equal(kept) {
		t.Errorf("with every source forgotten the watermark is %v; want %v, as with them kept", forgotten, kept)
	}
}
