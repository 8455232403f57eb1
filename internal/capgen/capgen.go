// Package capgen generates mixed MCP captures: many sessions on Thegram and
// Oddlynew servers, mostly normal traffic, with scenarios that must produce
// findings (and traps that must not) interleaved in event time, plus noise
// (reads, listings, duplicate observations, bad lines). Each generated
// capture comes with the findings it must produce. It feeds tests of the
// detector on interleaved traffic, the engine benchmark and the load
// command.
//
// A Stream generates a capture while it is read, in event-time order,
// holding only the calls of the sessions still open; Generate collects a
// whole capture in memory. Each call can be written as a call record
// (AppendRecord) or as the OTLP span an MCP server's instrumentation
// records (AppendSpan).
package capgen

import (
	"time"
)

// Config shapes a capture.
type Config struct {
	// Seed makes the capture reproducible.
	Seed int64
	// Sessions is how many sessions to generate.
	Sessions int
	// Start is the event time of the first session. Default 2026-11-02 09:00 UTC.
	Start time.Time
	// Span is how long sessions keep starting. Default 1h.
	Span time.Duration
	// AnomalyRate is the share of sessions that run a scenario with
	// findings or a trap. Default 0.2.
	AnomalyRate float64
	// NoiseRate is the share of duplicate observations and bad lines added
	// to the capture. Default 0.01.
	NoiseRate float64
	// Tenant is written into every record when set.
	Tenant string
	// NoTail leaves out the harmless call 20 minutes after the last
	// session, which closes every verification window of a finite
	// capture in event time. A live load leaves that to the collector's
	// clock.
	NoTail bool
}

// Expected is one finding the capture must produce, matched as the example
// captures are: kind and server equal, and document or key equal.
type Expected struct {
	Kind     string `json:"kind"`
	Server   string `json:"server"`
	Document string `json:"document,omitempty"`
	Key      string `json:"key,omitempty"`
}

// Capture is a generated capture.
type Capture struct {
	// Lines are NDJSON call records in event time order (bad lines and
	// duplicate observations included).
	Lines [][]byte
	// Expected are the findings it must produce.
	Expected []Expected
	// Calls is how many distinct calls it holds.
	Calls int
	// BadLines is how many lines must be rejected.
	BadLines int
	// Scenarios counts the sessions of each scenario.
	Scenarios map[string]int
}

// Generate builds a whole capture in memory. Prefer a Stream for large
// captures.
func Generate(cfg Config) *Capture {
	s := NewStream(cfg)
	c := &Capture{}
	s.OnExpected = func(e Expected) { c.Expected = append(c.Expected, e) }
	for {
		call, ok := s.Next()
		if !ok {
			break
		}
		c.Lines = append(c.Lines, call.AppendRecord(nil))
	}
	c.Calls, c.BadLines, c.Scenarios = s.Calls(), s.BadLines(), s.Scenarios()
	return c
}
