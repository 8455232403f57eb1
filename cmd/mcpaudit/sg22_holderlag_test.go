package main

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestPipelineView_QuietSlowClockHolds (sg22; live22's S1): from a real
// engine's status to the gauge serve exports. An exporter 10 minutes slow
// beside an on-time one holds thegram; once quiet between its batches
// (past detect.idle_timeout) it still holds at its lag, and
// mcpaudit_pipeline_source_lag_seconds{state="active"} keeps that lag.
// Before, it read the on-time exporter's second or two: McpAuditSourceLagging
// (5 m for 10 m) never fired for a server held 10 minutes behind.
func TestPipelineView_QuietSlowClockHolds(t *testing.T) {
	const onTime, slow = "otlp:agent/h1", "otlp:agent/b10"
	const lag = 10 * time.Minute
	e := detect.NewEngine(detect.NewDefaultConfig())
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	id := 0
	read := func(src string, wall time.Time) {
		id++
		at := wall.Add(-time.Second)
		if src == slow {
			at = at.Add(-lag)
		}
		line := fmt.Sprintf(`{"time":%q,"server":"thegram","session":"s","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"response":{"jsonrpc":"2.0","id":%d,"result":{}}}`,
			at.Format(time.RFC3339Nano), id, id)
		dec, err := capture.NewDecoder(bytes.NewReader([]byte(line)), "line")
		if err != nil {
			t.Fatal(err)
		}
		c, err := dec.Next()
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		e.Add(src, rd.Read(c).Lean(), wall)
	}
	wall := time.Date(2026, 12, 6, 16, 0, 0, 0, time.UTC)
	for range 30 {
		read(onTime, wall)
		read(slow, wall)
		e.Tick(wall)
		wall = wall.Add(time.Second)
	}
	// The slow exporter is quiet for 15 s, past the idle timeout (10 s);
	// the on-time one goes on.
	for range 15 {
		read(onTime, wall)
		e.Tick(wall)
		wall = wall.Add(time.Second)
	}
	parts := e.Status(wall)
	if len(parts) != 1 || parts[0].HeldBy != slow {
		t.Fatalf("status: %+v; want thegram held by %s", parts, slow)
	}
	reg := metrics.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{Servers: []string{"thegram"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WatchPipeline(reg, func() []metrics.PartitionView { return []metrics.PartitionView{pipelineView(parts[0])} }); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	active := -1.0
	for _, mf := range mfs {
		if mf.GetName() != metrics.PipelineSourceLagSeconds {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == metrics.LabelState && l.GetValue() == metrics.SourceActive {
					active = mt.GetGauge().GetValue()
				}
			}
		}
	}
	// It held at the lag it showed while it delivered: 10 min and the
	// second its spans took.
	if active < lag.Seconds() || active > lag.Seconds()+5 {
		t.Errorf("%s{state=%q} = %g while %s holds thegram %s behind; want its lag, about %g", metrics.PipelineSourceLagSeconds, metrics.SourceActive, active, slow, lag, lag.Seconds())
	}
}
