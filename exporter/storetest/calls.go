package storetest

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"regexp"
	"sort"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// The captures under testdata are copies of the repository's examples
// (testdata/examples/*.ndjson): real shapes of Thegram and Oddlynew traffic.
//
//go:embed testdata/*.ndjson
var captures embed.FS

// Capture returns the calls of one embedded capture (its file name without
// directory, e.g. "thegram-normal-edit.ndjson") in file order.
func Capture(name string) ([]*audit.Call, error) {
	f, err := captures.Open("testdata/" + name)
	if err != nil {
		return nil, fmt.Errorf("cannot open capture %s: %w", name, err)
	}
	defer f.Close()
	dec, err := capture.NewDecoder(f, name)
	if err != nil {
		return nil, err
	}
	var calls []*audit.Call
	for {
		c, err := dec.Next()
		if errors.Is(err, io.EOF) {
			return calls, nil
		}
		if err != nil {
			return nil, fmt.Errorf("cannot read capture %s: %w", name, err)
		}
		calls = append(calls, c)
	}
}

// CaptureNames lists the embedded captures.
func CaptureNames() []string {
	names, _ := fs.Glob(captures, "testdata/*.ndjson")
	for i, n := range names {
		names[i] = n[len("testdata/"):]
	}
	sort.Strings(names)
	return names
}

// hexRun matches the random parts of the sample calls: ids, hashes, the
// random suffixes of sessions, paths and notes.
var hexRun = regexp.MustCompile(`[0-9a-f]{6,}`)

// Generator makes realistic traffic for benchmarks and size measurements by
// replaying the embedded captures in turn, one after the other in event
// time. Each replay draws the random parts of its calls (hex runs of six or
// more characters: sessions, paths, hashes, request ids) anew, consistently
// within the replay, so that a replay is the same conversation on new
// documents and the detector finds in it what it finds in the capture. Every
// call also gets a random trace and span id, as OTLP carries. It is
// deterministic for a seed and not safe for concurrent use.
type Generator struct {
	captures [][]*audit.Call
	rng      *rand.Rand
	reader   *dialect.Reader
	next     int           // capture of the next replay
	queue    []*audit.Call // what is left of the current replay
	shift    time.Duration // from capture time to replay time
	end      time.Time     // the last time of the replays so far
	mapping  map[string]string
	rpc      int
}

// NewGenerator returns a generator whose first replay starts at start,
// replaying the named captures (every embedded capture when none is named).
func NewGenerator(seed uint64, start time.Time, captures ...string) (*Generator, error) {
	if len(captures) == 0 {
		captures = CaptureNames()
	}
	g := &Generator{
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		reader: dialect.NewReader(dialect.Config{}),
		end:    start.Add(-time.Second),
	}
	for _, name := range captures {
		calls, err := Capture(name)
		if err != nil {
			return nil, err
		}
		if len(calls) > 0 {
			g.captures = append(g.captures, calls)
		}
	}
	if len(g.captures) == 0 {
		return nil, errors.New("cannot generate calls: the captures hold none")
	}
	return g, nil
}

// Next returns the next call record.
func (g *Generator) Next() audit.Record {
	if len(g.queue) == 0 {
		calls := g.captures[g.next%len(g.captures)]
		g.next++
		first, last := calls[0].Time, calls[0].Time
		for _, c := range calls {
			if c.Time.Before(first) {
				first = c.Time
			}
			if c.Time.After(last) {
				last = c.Time
			}
		}
		g.queue = calls
		g.shift = g.end.Add(time.Second).Sub(first)
		g.end = last.Add(g.shift)
		g.mapping = map[string]string{}
	}
	tpl := g.queue[0]
	g.queue = g.queue[1:]
	g.rpc++
	c := *tpl
	c.Time = tpl.Time.Add(g.shift)
	c.Session = g.randomize(tpl.Session)
	c.TraceID = g.hex(32)
	c.SpanID = g.hex(16)
	c.Arguments = g.randomizeBytes(tpl.Arguments)
	c.Result = g.randomizeBytes(tpl.Result)
	if tpl.Error != nil {
		e := *tpl.Error
		e.Data = g.randomizeBytes(e.Data)
		c.Error = &e
	}
	args := canon.Bytes(c.Arguments)
	c.ID = audit.StableID(c.Server, c.Session, c.RPCID, c.Time, c.Tool, args)
	c.Fingerprint = audit.Fingerprint(c.Server, c.Session, c.RPCID, c.Tool, args)
	return *g.reader.Read(&c)
}

// Records returns the next n call records.
func (g *Generator) Records(n int) []audit.Record {
	recs := make([]audit.Record, n)
	for i := range recs {
		recs[i] = g.Next()
	}
	return recs
}

func (g *Generator) hex(n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = digits[g.rng.IntN(16)]
	}
	return string(b)
}

func (g *Generator) replace(m string) string {
	r, ok := g.mapping[m]
	if !ok {
		r = g.hex(len(m))
		g.mapping[m] = r
	}
	return r
}

func (g *Generator) randomize(s string) string {
	return hexRun.ReplaceAllStringFunc(s, g.replace)
}

func (g *Generator) randomizeBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return hexRun.ReplaceAllFunc(b, func(m []byte) []byte { return []byte(g.replace(string(m))) })
}
