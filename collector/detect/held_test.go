package detect

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// heldRecords counts the records the engine's duplicate check holds.
func heldRecords(e *Engine) int {
	n := 0
	for _, p := range e.parts {
		for _, sl := range p.dedupe.byReq.m {
			for _, s := range sl.v.l {
				if s.r != nil {
					n++
				}
			}
		}
	}
	return n
}

// TestNotHeldWhenSentAgainLate: calls sent again after their time was
// judged (a file given twice to analyze, a backlog replayed into a
// partition whose watermark passed it) move no watermark, so nothing they
// leave in the duplicate check is swept before the input ends; none of
// them may leave its record there. Before, a file given twice was held
// whole (the 179 MB capture peaked at 464 MiB given twice, 96 once).
func TestNotHeldWhenSentAgainLate(t *testing.T) {
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	c := capgen.Generate(capgen.Config{Seed: 5, Sessions: 400, Start: start, Span: 10 * time.Minute, AnomalyRate: 0.2, NoiseRate: 0})
	rd := dialect.NewReader(dialect.Config{})
	var recs []*audit.Record
	dec, err := capture.NewDecoder(bytes.NewReader(bytes.Join(c.Lines, []byte("\n"))), "capture")
	if err != nil {
		t.Fatal(err)
	}
	for {
		c, err := dec.Next()
		if err == io.EOF {
			break
		}
		if err == nil { // bad lines are the capture's noise
			recs = append(recs, rd.Read(c))
		}
	}
	for _, tc := range []struct {
		name string
		ids  int // recent ids kept: 0, none (serve); fewer than the calls: ids forgotten
	}{{"repeated ids dropped", recentIDsKept}, {"ids forgotten, too late", 50}, {"no id check, too late", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEngine(NewDefaultConfig())
			if tc.ids > 0 {
				e.ids = newRecentIDs(tc.ids)
			}
			for _, r := range recs {
				e.Add("file", r, time.Time{})
			}
			once := heldRecords(e)
			dup, late := e.stats.Duplicates, e.stats.TooLate
			for _, r := range recs {
				cp := *r
				e.Add("file", &cp, time.Time{})
			}
			if got := heldRecords(e); got > once {
				t.Errorf("%d records held after the calls were sent again, %d before", got, once)
			}
			if e.stats.Duplicates+e.stats.TooLate-dup-late != int64(len(recs)) {
				t.Errorf("sent again: %d duplicates and %d too late, want %d together",
					e.stats.Duplicates-dup, e.stats.TooLate-late, len(recs))
			}
		})
	}
}
