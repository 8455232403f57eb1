package capgen

import (
	"bytes"
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/canon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// TestStream_BoundedMemory: a stream of a million calls holds only the
// calls of the sessions still open, never the capture: the most it held
// stays a small fraction of what it generated, does not grow with the
// length of the capture at the same rate, and the heap after a million
// calls is what it was after a fifth of them.
func TestStream_BoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a million calls")
	}
	// About 93 calls/s of event time, over 3 h: a day's traffic of a
	// small fleet.
	cfg := Config{Seed: 3, Sessions: 350_000, Span: 3 * time.Hour, AnomalyRate: 0.1, NoiseRate: 0.001, NoTail: true}
	s := NewStream(cfg)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var early uint64
	var heldEarly int
	n := 0
	for {
		c, ok := s.Next()
		if !ok {
			break
		}
		if c.Kind == KindCall {
			n++
		}
		if n == 200_000 && early == 0 {
			early, heldEarly = heap(), s.MaxHeld()
		}
	}
	late := heap()
	t.Logf("%d calls; at most %d held (%d in the first 200k); heap %.1f MiB after 200k calls, %.1f MiB at the end",
		n, s.MaxHeld(), heldEarly, float64(early)/(1<<20), float64(late)/(1<<20))
	if n < 900_000 {
		t.Fatalf("only %d calls generated", n)
	}
	if s.MaxHeld() > n/100 {
		t.Errorf("held up to %d calls of %d: the stream keeps the capture", s.MaxHeld(), n)
	}
	if s.MaxHeld() > 2*heldEarly {
		t.Errorf("held %d calls after 200k, %d by the end: what it holds grows with the capture", heldEarly, s.MaxHeld())
	}
	if late > early+16<<20 {
		t.Errorf("the heap grew from %d to %d bytes between 200k calls and the end", early, late)
	}
}

// TestStream_Order: calls come in event-time order, a duplicate
// observation right after its original, and each session's calls in
// order with JSON-RPC ids counting up.
func TestStream_Order(t *testing.T) {
	s := NewStream(Config{Seed: 9, Sessions: 5000, Span: 20 * time.Minute, AnomalyRate: 0.4, NoiseRate: 0.05})
	var prev *Call
	rpc := map[string]int{}
	repeats, bad := 0, 0
	for {
		c, ok := s.Next()
		if !ok {
			break
		}
		switch c.Kind {
		case KindRepeat:
			repeats++
			if prev == nil || c.Session != prev.Session || c.RPCID != prev.RPCID || !c.Time.Equal(prev.Time.Add(200*time.Millisecond)) {
				t.Fatalf("a repeat not right after its original")
			}
			continue
		case KindBad:
			bad++
			continue
		}
		if prev != nil && c.Time.Before(prev.Time) {
			t.Fatalf("%s at %s after %s", c.Tool, c.Time, prev.Time)
		}
		if c.RPCID != rpc[c.Session]+1 {
			t.Fatalf("session %s: call %d after %d", c.Session, c.RPCID, rpc[c.Session])
		}
		rpc[c.Session] = c.RPCID
		prev = c
	}
	if repeats == 0 || bad == 0 || bad != s.BadLines() {
		t.Errorf("%d repeats, %d bad lines (counted %d)", repeats, bad, s.BadLines())
	}
}

// TestStream_Payloads: every record is JSON; arguments are in canonical
// form, as most encoders write them (so the collector hashes them as
// they are); the OTLP span of a call carries the same payloads.
func TestStream_Payloads(t *testing.T) {
	s := NewStream(Config{Seed: 4, Sessions: 3000, AnomalyRate: 0.5, NoiseRate: 0.02})
	tools := map[string]int{}
	for {
		c, ok := s.Next()
		if !ok {
			break
		}
		line := c.AppendRecord(nil)
		if c.Kind == KindBad {
			continue
		}
		var rec struct {
			Time    time.Time `json:"time"`
			Request struct {
				Params struct{ Arguments json.RawMessage }
			}
			Response *struct{ Result json.RawMessage }
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if !rec.Time.Equal(c.Time) || string(rec.Request.Params.Arguments) != c.Arguments {
			t.Fatalf("record %s does not carry the call's time and arguments", line)
		}
		if got := canon.Bytes([]byte(c.Arguments)); string(got) != c.Arguments {
			t.Fatalf("%s arguments not canonical:\n%s\n%s", c.Tool, c.Arguments, got)
		}
		if c.Result != "" && !json.Valid([]byte(c.Result)) {
			t.Fatalf("%s result is not JSON: %s", c.Tool, c.Result)
		}
		tools[c.Tool]++

		td := ptrace.NewTraces()
		AppendTraces(td, "i-1", []*Call{c})
		sp := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
		args, _ := sp.Attributes().Get("gen_ai.tool.call.arguments")
		if args.Str() != c.Arguments || sp.StartTimestamp().AsTime() != c.Time.UTC() {
			t.Fatalf("span of %s does not carry its arguments and time", c.Tool)
		}
	}
	for _, tool := range []string{"gram_projects", "gram_read", "gram_patch", "run", "guide"} {
		if tools[tool] == 0 {
			t.Errorf("no %s call", tool)
		}
	}
}

// TestGenerate_Deterministic: a seed gives one capture.
func TestGenerate_Deterministic(t *testing.T) {
	cfg := Config{Seed: 12, Sessions: 300, AnomalyRate: 0.5, NoiseRate: 0.05}
	a, b := Generate(cfg), Generate(cfg)
	if !bytes.Equal(bytes.Join(a.Lines, nil), bytes.Join(b.Lines, nil)) || len(a.Expected) != len(b.Expected) {
		t.Fatal("two captures of one seed differ")
	}
	if len(a.Expected) == 0 || a.Calls == 0 || a.BadLines == 0 {
		t.Fatalf("%d expected findings, %d calls, %d bad lines", len(a.Expected), a.Calls, a.BadLines)
	}
}

// TestStream_LiveMemory: a live load at 20k calls/s holds the calls of
// the sessions under way (about 9.4 s of its rate), and each held call
// costs its payloads and little more: under 1 KiB of heap.
func TestStream_LiveMemory(t *testing.T) {
	s := NewStream(Config{Seed: 1, Sessions: 20000 * 60 / 3, Span: time.Minute, AnomalyRate: 0.1, NoiseRate: 0.001, NoTail: true})
	s.Skip(time.Date(2026, 11, 2, 9, 0, 40, 0, time.UTC))
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	per := float64(m.HeapAlloc) / float64(s.Held())
	t.Logf("%d calls held, heap %.1f MiB, %.0f B per held call", s.Held(), float64(m.HeapAlloc)/(1<<20), per)
	if s.Held() < 100_000 || s.Held() > 300_000 {
		t.Errorf("%d calls held at 20k calls/s", s.Held())
	}
	if per > 1024 {
		t.Errorf("%.0f bytes of heap per held call", per)
	}
}
