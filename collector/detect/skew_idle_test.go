package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestSkewedSourceGoneQuiet: a source whose clock runs an hour ahead
// delivers one batch and stops. Its clock is clamped to the wall clock plus
// max_clock_skew; once it is quiet, the partition's watermark must not go
// on running that far ahead of the wall clock for ever, or every call of
// a source with a right clock is judged late, a skew behind, from then on.
func TestSkewedSourceGoneQuiet(t *testing.T) {
	cfg := NewDefaultConfig()
	e := NewEngine(cfg, countFindings(func() {}))
	rd := dialect.NewReader(dialect.Config{})
	rec := func(at time.Time, id int) *audit.Record {
		line := fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d/%d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"d/%d.gram","rev":4,"hash":"bb"}}}}`,
			at.Format(time.RFC3339Nano), id, id, id, id, id)
		return leanRecord(t, rd, line)
	}
	t0 := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	e.Add("ahead", rec(t0.Add(time.Hour), 1), t0)
	// The skewed source stays quiet; the wall clock goes on for 5 minutes.
	for wall := t0; !wall.After(t0.Add(5 * time.Minute)); wall = wall.Add(time.Second) {
		e.Tick(wall)
	}
	wall := t0.Add(5 * time.Minute)
	p := e.parts[PartitionKey{Server: "thegram"}]
	if ahead := p.wm.Sub(wall); ahead > 0 {
		t.Errorf("5 minutes after the skewed source went quiet the watermark is %v ahead of the wall clock; want it caught up", ahead)
	}
	// From then on it moves with the wall clock, as it does after a source
	// with a right clock went quiet (less the lateness bound, which a
	// quiet partition keeps as a busy one does).
	e.Tick(wall.Add(time.Minute))
	if got, want := p.wm, wall.Add(time.Minute-cfg.Lateness); !got.Equal(want) {
		t.Errorf("a minute later the watermark is %v; want the wall clock less the lateness, %v", got, want)
	}
}
