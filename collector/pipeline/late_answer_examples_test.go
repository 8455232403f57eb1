package pipeline_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// unansweredCopy is line as a client observer that timed out records it:
// the same request at the same time (so the same call id), no response,
// transport_error timeout (live21's repro.sh, fx20a's laLinesWith).
func unansweredCopy(t *testing.T, line []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "response")
	delete(m, "duration_ms")
	m["transport_error"] = "timeout"
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// answeredWrites returns the indexes of scen's answered calls of a write,
// run or copy tool (thegram's gram_patch, oddlynew's run: its creates,
// copies and reads alike).
func answeredWrites(t *testing.T, scen [][]byte) []int {
	var out []int
	for i, l := range scen {
		var m struct {
			Request struct {
				Params struct {
					Name string `json:"name"`
				} `json:"params"`
			} `json:"request"`
			Response json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatal(err)
		}
		if len(m.Response) > 0 && (m.Request.Params.Name == "gram_patch" || m.Request.Params.Name == "run") {
			out = append(out, i)
		}
	}
	return out
}

// leCase is one delivery of an example with one call's answer late.
type leCase struct {
	// closed delivers the answer once the call's window has closed
	// (verify_window 20 s, the clock 60 s on); else 30 s on, the call
	// judged, its window (the default 5 m) open.
	closed bool
	ack    string
	// restart stops the process between the two observations.
	restart bool
}

// TestLateAnswer_Examples (lf21; live21's D1 and D2) delivers every
// example capture (both servers) with one answered call of a write, run
// or copy tool first unanswered, as a client observer's timeout, from
// one source, and its answer later from another (a lagging server
// exporter), within allowed_lateness: the window open, the window
// closed, both acks, and once a stop between the two. The open findings
// the store holds (withdrawn ones left out) and the write states must be
// analyze's of the answered capture in time order. Before lf21 a late
// answer carrying a rejection made no integrity_failure or wasted_retry
// (D1), and most late oddlynew answers were not taken (D2).
func TestLateAnswer_Examples(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/examples/*.ndjson")
	if len(files) == 0 {
		t.Fatal("no examples under testdata/examples")
	}
	cases := map[string]leCase{
		"open/commit":           {ack: sqlite.AckCommit},
		"open/log":              {ack: sqlite.AckLog},
		"closed/commit":         {closed: true, ack: sqlite.AckCommit},
		"closed/log":            {closed: true, ack: sqlite.AckLog},
		"closed/commit/restart": {closed: true, ack: sqlite.AckCommit, restart: true},
	}
	names := sortedKeys(cases)
	for _, path := range files {
		scen, tail := exampleLines(t, path)
		for _, i := range answeredWrites(t, scen) {
			for _, name := range names {
				tc := cases[name]
				ex := strings.TrimSuffix(filepath.Base(path), ".ndjson")
				t.Run(fmt.Sprintf("%s/call%d/%s", ex, i+1, name), func(t *testing.T) {
					lateAnswerOf(t, scen, tail, i, tc)
				})
			}
		}
	}
}

// lateAnswerOf plays scen with call i's answer late under tc.
func lateAnswerOf(t *testing.T, scen, tail [][]byte, i int, tc leCase) {
	dedit := func(c *detect.Config) {
		c.AllowedLateness = lateLateness(t, scen) + 2*time.Minute
		if tc.closed {
			c.VerifyWindow = 20 * time.Second
		}
	}
	dcfg := detect.NewDefaultConfig()
	dedit(&dcfg)
	want := analyzed(t, append(slices.Clone(scen), tail...), dcfg)

	first := slices.Clone(scen)
	first[i] = unansweredCopy(t, scen[i])
	recs := decode(t, scen)
	last := recs[len(recs)-1].Call.Time
	dir := t.TempDir()
	clock := newClock(last.Add(time.Second))
	opts := sqlite.Options{Synchronous: "normal", Ack: tc.ack}
	r := openRunWith(t, dir, clock, nil, dedit, nil, nil, opts)
	if _, err := r.ingest(batch(t, "calls:client", first...)); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Second)
	r.status()
	// The call judged unanswered before its answer comes: past the
	// watermark (30 s), and past its window's end when closed (60 s).
	r.steps(1, nil)
	if tc.closed {
		r.steps(1, nil)
	}
	if tc.restart {
		r.stop()
		r = openRunWith(t, dir, clock, nil, dedit, nil, nil, opts)
	}
	if _, err := r.ingest(batch(t, "calls:server", scen[i])); err != nil {
		t.Fatal(err)
	}
	for _, l := range tail {
		tr := decode(t, [][]byte{l})[0]
		if d := tr.Call.Time.Add(time.Second).Sub(r.clock.Now()); d > 0 {
			r.clock.Add(d)
		}
		if _, err := r.ingest(batch(t, "calls:client", l)); err != nil {
			t.Fatal(err)
		}
	}
	r.steps(4, nil)
	parts := r.status()
	o := r.stop()
	for k, p := range parts {
		if p.TooLate != 0 {
			t.Errorf("%v: %d calls too late: the answer is not within allowed_lateness", k, p.TooLate)
		}
	}
	got := map[string]string{}
	for _, id := range openFindings(o) {
		f := o.findings[id]
		got[id] = describe(&f)
	}
	if fmt.Sprint(got) != fmt.Sprint(want.findings) {
		t.Errorf("call %d answered late: open findings\n%v\nwant (analyze, in order)\n%v", i+1, values(got), values(want.findings))
	}
	if fmt.Sprint(o.writes) != fmt.Sprint(want.writes) {
		t.Errorf("call %d answered late: write states\n%v\nwant\n%v", i+1, o.writes, want.writes)
	}
	if c := recs[i].Call; c.Responded && o.calls[c.ID] != 1 {
		t.Errorf("call %d stored %d times", i+1, o.calls[c.ID])
	}
}
