package storetest

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// Collector is an audit.Sink that keeps the detector's output as Results:
// the latest state of every write and every finding, copied.
type Collector struct {
	writes  map[string]int // (call, seq) → index in Results.Writes
	Results audit.Results
}

var _ audit.Sink = (*Collector)(nil)

// Call implements audit.Sink.
func (c *Collector) Call(*audit.Record) {}

// Write implements audit.Sink: the latest state replaces the earlier one.
func (c *Collector) Write(w *audit.Write, _ audit.WriteState) {
	if c.writes == nil {
		c.writes = map[string]int{}
	}
	k := fmt.Sprintf("%s\x00%d", w.CallID, w.Seq)
	if i, ok := c.writes[k]; ok {
		c.Results.Writes[i] = *w
		return
	}
	c.writes[k] = len(c.Results.Writes)
	c.Results.Writes = append(c.Results.Writes, *w)
}

// Finding implements audit.Sink.
func (c *Collector) Finding(f *audit.Finding) {
	g := *f
	g.Calls = slices.Clone(f.Calls)
	c.Results.Findings = append(c.Results.Findings, g)
}

// MinMark returns the earliest partition watermark: what the pipeline
// commits as the store's watermark.
func MinMark(e *detect.Engine) time.Time {
	var m time.Time
	for _, t := range e.Watermarks() {
		if m.IsZero() || t.Before(m) {
			m = t
		}
	}
	return m
}

// testCapture runs every sample capture through the dialect reader and the
// detector as serve does (calls appended first, then the detector's output
// committed) and checks that the store gives back the calls and exactly the
// detector's findings and write states.
func testCapture(t *testing.T, s audit.Store) {
	reader := dialect.NewReader(dialect.Config{})
	cfg := detect.NewDefaultConfig()
	var all []*audit.Call
	var docs []string
	var results audit.Results
	for _, name := range CaptureNames() {
		cs, err := Capture(name)
		if err != nil {
			t.Fatal(err)
		}
		recs := make([]audit.Record, len(cs))
		for i, c := range cs {
			recs[i] = *reader.Read(c)
			for _, doc := range recs[i].Documents() {
				if !slices.Contains(docs, doc) {
					docs = append(docs, doc)
				}
			}
		}
		// As serve does: calls are stored before the detector sees them.
		appendCalls(t, s, recs...)
		all = append(all, cs...)
		var col Collector
		// As analyze does, one input: the call's own time is the wall time
		// of its delivery, so that quiet closes the windows at the end.
		e := detect.NewEngine(cfg, &col)
		var last time.Time
		for i, c := range cs {
			e.Add(name, &recs[i], c.Time)
			if c.Time.After(last) {
				last = c.Time
			}
			if i == len(cs)/2 {
				// Part of the output first, then all of it: what was
				// committed already is committed again after a restart.
				col.Results.Watermark = MinMark(e)
				commit(t, s, col.Results)
			}
		}
		// Close every verification window, so that unverified writes show.
		e.Tick(last.Add(cfg.VerifyWindow + cfg.IdleTimeout + time.Second))
		col.Results.Watermark = MinMark(e)
		commit(t, s, col.Results)
		results.Writes = append(results.Writes, col.Results.Writes...)
		results.Findings = append(results.Findings, col.Results.Findings...)
	}
	if len(results.Findings) == 0 {
		t.Fatal("the captures gave no findings: nothing is checked")
	}

	// Several captures end with the same calls: those are stored once.
	byTimeID := func(a, b *audit.Call) int { return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.ID, b.ID)) }
	slices.SortStableFunc(all, byTimeID)
	all = slices.CompactFunc(all, func(a, b *audit.Call) bool { return a.ID == b.ID })
	got := scan(t, s, time.Time{})
	slices.SortStableFunc(got, byTimeID)
	diffCalls(t, got, all)

	want := slices.Clone(results.Findings)
	sortFindings(want)
	// Findings re-derived for the same evidence are stored once.
	want = slices.CompactFunc(want, func(a, b audit.Finding) bool { return a.ID() == b.ID() })
	if stored := allFindings(t, s, audit.FindingQuery{Limit: 7}); !reflect.DeepEqual(stored, want) {
		t.Errorf("stored findings differ from the detector's:\n got %v\nwant %v", summaries(stored), summaries(want))
	}

	counts := map[audit.WriteState]int64{}
	for _, w := range results.Writes {
		counts[w.State]++
	}
	if got, err := s.WriteCounts(ctx(t), audit.CountQuery{}); err != nil || !reflect.DeepEqual(got, counts) {
		t.Errorf("WriteCounts = %v, %v; want the detector's %v", got, err, counts)
	}

	// Every call on a document is on its timeline, with its findings.
	for _, doc := range docs {
		events, err := eventsOf(s.Timeline(ctx(t), audit.TimelineQuery{Document: doc}))
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, e := range events {
			n[e.Type]++
		}
		wantCalls, wantFindings := 0, 0
		for _, c := range all {
			if r := *reader.Read(c); slices.Contains(r.Documents(), doc) {
				wantCalls++
			}
		}
		for _, f := range want {
			if f.Document == doc {
				wantFindings++
			}
		}
		if n[audit.EventCall] != wantCalls || n[audit.EventFinding] != wantFindings {
			t.Errorf("timeline of %s: %d calls and %d findings, want %d and %d", doc, n[audit.EventCall], n[audit.EventFinding], wantCalls, wantFindings)
		}
	}
}

func summaries(fs []audit.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "\n  %s %s %s %v", f.Time.Format("15:04:05.000"), f.Kind, f.Document, f.Calls)
	}
	return b.String()
}
