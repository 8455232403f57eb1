package detect_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// passing is a sink that keeps no record past its Call: it notes the
// records given to it until the engine gives them back.
type passing struct {
	*sink
	pending map[*audit.Record]bool
	calls   int
}

func (p *passing) Call(r *audit.Record) {
	p.pending[r] = true
	p.calls++
}

// TestOnJudged: every call judged is given back once, after the sinks had
// it; and records filled again once given back (as analyze does) are
// judged as new ones: the same findings and write states.
func TestOnJudged(t *testing.T) {
	c := capgen.Generate(capgen.Config{Seed: 11, Sessions: 2000, AnomalyRate: 0.3, NoiseRate: 0.002})
	data := bytes.Join(c.Lines, []byte("\n"))
	want := newSink()
	d := newRunner(detect.NewDefaultConfig(), want)
	d.drop = true
	feed(t, d, data)

	got := &passing{sink: newSink(), pending: map[*audit.Record]bool{}}
	d = newRunner(detect.NewDefaultConfig(), got)
	d.drop = true
	given := 0
	d.e.OnJudged(func(r *audit.Record) {
		if !got.pending[r] {
			t.Fatalf("call %s given back without having been judged", r.Call.ID)
		}
		delete(got.pending, r)
		given++
		d.r.Recycle(r)
	})
	feed(t, d, data)
	if len(got.pending) != 0 || given != got.calls || int64(given) != d.e.Stats().Calls || given < c.Calls/2 {
		t.Fatalf("%d calls judged, %d given back, %d not, stats %d", got.calls, given, len(got.pending), d.e.Stats().Calls)
	}
	if len(want.findings) == 0 || fmt.Sprint(want.findings) != fmt.Sprint(got.findings) || fmt.Sprint(want.writes) != fmt.Sprint(got.writes) {
		t.Fatalf("findings %d vs %d, writes %d vs %d", len(want.findings), len(got.findings), len(want.writes), len(got.writes))
	}
}
