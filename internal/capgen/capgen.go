// Package capgen generates mixed MCP captures: many sessions on Thegram and
// Oddlynew servers, mostly normal traffic, with scenarios that must produce
// findings (and traps that must not) interleaved in event time, plus noise
// (reads, listings, duplicate observations, bad lines). Each generated
// capture comes with the findings it must produce. It feeds tests of the
// detector on interleaved traffic, the engine benchmark and the load
// command.
package capgen

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"sort"
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

type rec struct {
	at   time.Time
	line map[string]any
	seq  int
}

// session accumulates the calls of one session.
type session struct {
	g       *gen
	server  string
	id      string
	t       time.Time
	rpcID   int
	records []rec
}

type gen struct {
	cfg  Config
	rng  *rand.Rand
	out  []rec
	exp  []Expected
	seq  int
	docs int
}

// Generate builds a capture.
func Generate(cfg Config) *Capture {
	if cfg.Start.IsZero() {
		cfg.Start = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	}
	if cfg.Span == 0 {
		cfg.Span = time.Hour
	}
	if cfg.AnomalyRate == 0 {
		cfg.AnomalyRate = 0.2
	}
	if cfg.NoiseRate == 0 {
		cfg.NoiseRate = 0.01
	}
	g := &gen{cfg: cfg, rng: rand.New(rand.NewSource(cfg.Seed))}
	c := &Capture{Scenarios: map[string]int{}}
	var last time.Time
	for i := 0; i < cfg.Sessions; i++ {
		start := cfg.Start.Add(time.Duration(g.rng.Int63n(int64(cfg.Span))))
		var sc scenario
		if g.rng.Float64() < cfg.AnomalyRate {
			sc = anomalies[g.rng.Intn(len(anomalies))]
		} else {
			sc = normals[g.rng.Intn(len(normals))]
		}
		s := &session{g: g, server: sc.server, id: fmt.Sprintf("s-%x", g.rng.Int63()), t: start}
		sc.run(s)
		c.Scenarios[sc.name]++
		for _, r := range s.records {
			g.out = append(g.out, r)
			if r.at.After(last) {
				last = r.at
			}
		}
	}
	c.Calls = len(g.out)
	// A harmless tail call long after the last session closes every window.
	tail := &session{g: g, server: "thegram", id: "s-tail", t: last.Add(20 * time.Minute)}
	tail.call("gram_projects", map[string]any{}, okResult(map[string]any{"projects": []any{}}))
	g.out = append(g.out, tail.records...)
	c.Calls++

	sort.SliceStable(g.out, func(i, j int) bool { return g.out[i].at.Before(g.out[j].at) })
	for _, r := range g.out {
		b, _ := json.Marshal(r.line)
		c.Lines = append(c.Lines, b)
		if g.rng.Float64() < cfg.NoiseRate/2 {
			// A second observer of the same exchange, 200 ms off.
			dup := map[string]any{}
			for k, v := range r.line {
				dup[k] = v
			}
			dup["time"] = r.at.Add(200 * time.Millisecond).Format(time.RFC3339Nano)
			b, _ := json.Marshal(dup)
			c.Lines = append(c.Lines, b)
		}
		if g.rng.Float64() < cfg.NoiseRate/2 {
			c.Lines = append(c.Lines, badLines[g.rng.Intn(len(badLines))])
			c.BadLines++
		}
	}
	c.Expected = g.exp
	return c
}

var badLines = [][]byte{
	[]byte(`{"time":"not a time","server":"thegram","request":{}}`),
	[]byte(`{"server":"thegram","request":{"params":{"name":"gram_read"}}}`),
	[]byte(`this is not json`),
	[]byte(`{"time":"2026-11-02T09:00:00Z","server":"oddlynew"}`),
}

// expect records a finding the capture must produce.
func (s *session) expect(kind, doc, key string) {
	s.g.exp = append(s.g.exp, Expected{Kind: kind, Server: s.server, Document: doc, Key: key})
}

// wait advances the session's clock by d plus up to half of d.
func (s *session) wait(d time.Duration) {
	s.t = s.t.Add(d + time.Duration(s.g.rng.Int63n(int64(d)/2+1)))
}

// call appends one exchange. outcome is a result map, an rpcErr, a
// transport error string, or nil (nothing observed).
func (s *session) call(tool string, args map[string]any, outcome any) {
	s.rpcID++
	line := map[string]any{
		"time":        s.t.Format(time.RFC3339Nano),
		"server":      s.server,
		"session":     s.id,
		"duration_ms": 20 + s.g.rng.Intn(800),
		"request": map[string]any{"jsonrpc": "2.0", "id": s.rpcID, "method": "tools/call",
			"params": map[string]any{"name": tool, "arguments": args}},
	}
	if s.g.cfg.Tenant != "" {
		line["tenant"] = s.g.cfg.Tenant
	}
	switch o := outcome.(type) {
	case nil:
	case string:
		line["transport_error"] = o
		line["duration_ms"] = 30000
	case rpcErr:
		line["response"] = map[string]any{"jsonrpc": "2.0", "id": s.rpcID, "error": map[string]any(o)}
	case map[string]any:
		line["response"] = map[string]any{"jsonrpc": "2.0", "id": s.rpcID, "result": o}
	}
	s.g.seq++
	s.records = append(s.records, rec{at: s.t, line: line, seq: s.g.seq})
	s.wait(2 * time.Second)
}

type rpcErr map[string]any

func (g *gen) hex(n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = digits[g.rng.Intn(16)]
	}
	return string(b)
}

func okResult(sc map[string]any) map[string]any {
	return map[string]any{"isError": false, "structuredContent": sc}
}
