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
//
// The calls… subtests (ur22; vf21's open D1) do the same with every two
// and every three of those calls unanswered and their answers 8 s apart,
// in every order, and check what the sinks were told too (each finding
// that stands told once more than its withdrawal: the metrics' made less
// withdrawn). Before ur22 a re-send's answer coming before the answer of
// the write it re-sent left their unsafe_retry open (oddlynew-normal-edit
// calls 3,2), or told it twice (oddlynew-in-flight-blind calls 2,1).
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
	// Each case runs on a store, a clock and a recorder of its own, and
	// only reads the example's lines: the cases run in parallel (go
	// test's -parallel), as most of their time is the engine's commit
	// ticker and the store's writes, not the CPU (flk46: 269 s in series
	// at load 40).
	// Several answers late, in every order (ur22): two modes, as the
	// orders are many (56 across the examples).
	orderCases := []string{"open/log", "closed/commit", "closed/commit/restart"}
	for _, path := range files {
		scen, tail := exampleLines(t, path)
		ex := strings.TrimSuffix(filepath.Base(path), ".ndjson")
		answered := answeredWrites(t, scen)
		for _, i := range answered {
			for _, name := range names {
				tc := cases[name]
				t.Run(fmt.Sprintf("%s/call%d/%s", ex, i+1, name), func(t *testing.T) {
					t.Parallel()
					lateAnswerOf(t, scen, tail, i, tc)
				})
			}
		}
		for _, order := range answerOrders(answered) {
			for _, name := range orderCases {
				tc := cases[name]
				t.Run(fmt.Sprintf("%s/calls%s/%s", ex, callList(order), name), func(t *testing.T) {
					t.Parallel()
					lateAnswersOf(t, scen, tail, order, tc)
				})
			}
		}
	}
}

// answerOrders returns every order of every two and every three of
// calls.
func answerOrders(calls []int) [][]int {
	var out [][]int
	var perms func(prefix, rest []int, n int)
	perms = func(prefix, rest []int, n int) {
		if len(prefix) == n {
			out = append(out, slices.Clone(prefix))
			return
		}
		for k, c := range rest {
			perms(append(prefix, c), slices.Concat(rest[:k], rest[k+1:]), n)
		}
	}
	for n := 2; n <= 3; n++ {
		// Every set once, then its orders: sets in order of their
		// calls, so subtest names read as delivered.
		var sets func(prefix, rest []int)
		sets = func(prefix, rest []int) {
			if len(prefix) == n {
				perms(nil, prefix, n)
				return
			}
			for k, c := range rest {
				sets(append(slices.Clone(prefix), c), rest[k+1:])
			}
		}
		sets(nil, calls)
	}
	return out
}

// callList names the calls of order (indexes) by number: "2,1".
func callList(order []int) string {
	s := make([]string, len(order))
	for k, i := range order {
		s[k] = fmt.Sprint(i + 1)
	}
	return strings.Join(s, ",")
}

// lateAnswerOf plays scen with call i's answer late under tc.
func lateAnswerOf(t *testing.T, scen, tail [][]byte, i int, tc leCase) {
	lateAnswersOf(t, scen, tail, []int{i}, tc)
}

// lateAnswersOf plays scen with the answers of the calls in order (their
// indexes) late under tc, in that order, 8 s apart.
func lateAnswersOf(t *testing.T, scen, tail [][]byte, order []int, tc leCase) {
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
	for _, i := range order {
		first[i] = unansweredCopy(t, scen[i])
	}
	recs := decode(t, scen)
	last := recs[len(recs)-1].Call.Time
	dir := t.TempDir()
	clock := newClock(last.Add(time.Second))
	opts := sqlite.Options{Synchronous: "normal", Ack: tc.ack}
	rec := newRecorder()
	r := openRunWith(t, dir, clock, nil, dedit, rec, nil, opts)
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
	for k, i := range order {
		if k > 0 {
			clock.Add(8 * time.Second)
			r.status()
		}
		if _, err := r.ingest(batch(t, "calls:server", scen[i])); err != nil {
			t.Fatal(err)
		}
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
	calls := callList(order)
	if fmt.Sprint(got) != fmt.Sprint(want.findings) {
		t.Errorf("calls %s answered late, in that order: open findings\n%v\nwant (analyze, in order)\n%v", calls, values(got), values(want.findings))
	}
	if fmt.Sprint(o.writes) != fmt.Sprint(want.writes) {
		t.Errorf("calls %s answered late, in that order: write states\n%v\nwant\n%v", calls, o.writes, want.writes)
	}
	for _, i := range order {
		if c := recs[i].Call; c.Responded && o.calls[c.ID] != 1 {
			t.Errorf("call %d stored %d times", i+1, o.calls[c.ID])
		}
	}
	if tc.restart {
		return
	}
	// What the sinks were told (the metrics' made less withdrawn) says
	// the same as the store.
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for id, n := range rec.findings {
		stands := 0
		if _, ok := want.findings[id]; ok {
			stands = 1
		}
		if n-rec.withdrawn[id] != stands {
			t.Errorf("calls %s answered late, in that order: the sinks were told finding %s %d times and its withdrawal %d times, want %d standing",
				calls, id, n, rec.withdrawn[id], stands)
		}
	}
}
