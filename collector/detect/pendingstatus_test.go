package detect_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// pendingSink keeps every write's latest state and time, by call and seq.
type pendingSink struct{ writes map[string]audit.Write }

func (s pendingSink) Call(*audit.Record) {}
func (s pendingSink) Write(w *audit.Write, _ audit.WriteState) {
	s.writes[fmt.Sprintf("%s/%d", w.CallID, w.Seq)] = *w
}
func (s pendingSink) Finding(*audit.Finding) {}

// TestStatus_Pending: a partition's status counts the writes the sinks
// were last told are pending, those whose state a later call or the end
// of their verification window may still change, and PendingUntil is the
// latest end of their windows; once every window has ended, none is.
// (mcpaudit status tells them, so that "judged" is not read as final.)
func TestStatus_Pending(t *testing.T) {
	cfg := detect.NewDefaultConfig()
	c := capgen.Generate(capgen.Config{Seed: 11, Sessions: 200, Span: 10 * time.Minute, AnomalyRate: 0.4})
	recs := readRecords(t, c.Lines)
	sink := pendingSink{writes: map[string]audit.Write{}}
	e := detect.NewEngine(cfg, sink)
	e.DropRepeatedIDs()
	check := func(now time.Time) int {
		t.Helper()
		want := map[string]int{}
		until := map[string]time.Time{}
		for _, w := range sink.writes {
			if w.State == audit.StatePending {
				want[w.Server]++
				if end := w.Time.Add(cfg.VerifyWindow); end.After(until[w.Server]) {
					until[w.Server] = end
				}
			}
		}
		total := 0
		for _, ps := range e.Status(now) {
			total += ps.Pending
			if ps.Pending != want[ps.Server] || !ps.PendingUntil.Equal(until[ps.Server]) {
				t.Errorf("%s at %s: %d pending until %s, want %d until %s (the sinks' pending writes)",
					ps.Server, now.Format(time.TimeOnly), ps.Pending, ps.PendingUntil, want[ps.Server], until[ps.Server])
			}
		}
		sum := 0
		for _, n := range want {
			sum += n
		}
		if total != sum {
			t.Errorf("at %s: the partitions count %d pending, the sinks were told of %d", now.Format(time.TimeOnly), total, sum)
		}
		return total
	}
	seen := 0
	var now time.Time
	for i, r := range recs {
		now = r.Call.Time.Add(time.Second)
		e.Add("post-"+r.Call.Server, r, now)
		e.Tick(now)
		if i%500 == 499 {
			seen = max(seen, check(now))
		}
	}
	if seen == 0 {
		t.Fatal("no write was ever pending: the traffic does not test the count")
	}
	// Every window ends and the watermark passes it: nothing is pending.
	for range 900 {
		now = now.Add(time.Second)
		e.Tick(now)
	}
	if n := check(now); n != 0 {
		t.Errorf("%d writes pending after every window ended", n)
	}
}
