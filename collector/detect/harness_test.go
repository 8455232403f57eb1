package detect_test

import (
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// runner reads calls with the default dialects and feeds an engine as
// analyze does: one source, no wall clock, repeated ids dropped.
type runner struct {
	e    *detect.Engine
	r    *dialect.Reader
	drop bool // forget payloads once read, as the live service does
}

func newRunner(cfg detect.Config, sinks ...audit.Sink) *runner {
	e := detect.NewEngine(cfg, sinks...)
	e.DropRepeatedIDs()
	return &runner{e: e, r: dialect.NewReader(dialect.Config{})}
}

func (r *runner) Add(c *audit.Call) {
	rec := r.r.Read(c)
	if r.drop {
		c.Arguments, c.Result = nil, nil
	}
	r.e.Add("input", rec, time.Time{})
}

// AddRecord takes a call its decoder read (capture.Decoder.NextRecord).
func (r *runner) AddRecord(rec *audit.Record) {
	if r.drop {
		rec.Call.Arguments, rec.Call.Result = nil, nil
	}
	r.e.Add("input", rec, time.Time{})
}

func (r *runner) Flush() { r.e.Flush() }
