package pipeline_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
)

// deliveryOrders returns orders of n calls (indexes), each once, by name:
// in order, reversed, each single call delayed to after the others, and
// each pair swapped.
func deliveryOrders(n int) (names []string, orders map[string][]int) {
	orders = map[string][]int{}
	seen := map[string]bool{}
	add := func(name string, o []int) {
		if k := fmt.Sprint(o); !seen[k] {
			seen[k] = true
			names = append(names, name)
			orders[name] = o
		}
	}
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	add("in_order", in)
	rev := slices.Clone(in)
	slices.Reverse(rev)
	add("reversed", rev)
	for i := range n {
		o := append(slices.Delete(slices.Clone(in), i, i+1), i)
		add(fmt.Sprintf("call%d_last", i+1), o)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			o := slices.Clone(in)
			o[i], o[j] = o[j], o[i]
			add(fmt.Sprintf("swap%d_%d", i+1, j+1), o)
		}
	}
	return names, orders
}

// exampleLines splits an example capture into its scenario's calls and
// its tail (the harmless call some minutes later that closes the windows).
func exampleLines(t *testing.T, path string) (scen, tail [][]byte) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		if bytes.Contains(l, []byte(`"session":"s-tail"`)) {
			tail = append(tail, l)
		} else {
			scen = append(scen, l)
		}
	}
	return scen, tail
}

// judged is what a run concluded, as compared across orders: each open
// finding's kind, severity and evidence, and the final state of each write.
type judged struct {
	findings map[string]string
	writes   map[string]audit.WriteState
}

type judgedSink struct{ j *judged }

func (s judgedSink) Call(*audit.Record) {}
func (s judgedSink) Write(w *audit.Write, _ audit.WriteState) {
	s.j.writes[fmt.Sprintf("%s/%d", w.CallID, w.Seq)] = w.State
}
func (s judgedSink) Finding(f *audit.Finding) { s.j.findings[f.ID()] = describe(f) }
func (s judgedSink) WithdrawFinding(f *audit.Finding, _ string, _ time.Time) {
	delete(s.j.findings, f.ID())
}

func describe(f *audit.Finding) string {
	return fmt.Sprintf("%s %s %s %v", f.Kind, f.Severity, f.Key+f.Document, f.Calls)
}

// analyzed judges lines in file order as analyze does: one source, no wall
// clock, every call taken once.
func analyzed(t *testing.T, lines [][]byte, cfg detect.Config) judged {
	j := judged{findings: map[string]string{}, writes: map[string]audit.WriteState{}}
	e := detect.NewEngine(cfg, judgedSink{&j})
	e.DropRepeatedIDs()
	for _, r := range decode(t, lines) {
		e.Add("analyze", r, time.Time{})
	}
	e.Flush()
	return j
}

// lateLateness is the allowed lateness under which every order of an
// example's calls is judged: the default, or more for a scenario whose
// calls lie further apart (thegram-both-succeeded-double-apply: 9.5 min).
func lateLateness(t *testing.T, scen [][]byte) time.Duration {
	recs := decode(t, scen)
	span := recs[len(recs)-1].Call.Time.Sub(recs[0].Call.Time)
	return max(detect.NewDefaultConfig().AllowedLateness, span+2*time.Minute)
}

// TestLateOrders_Examples (fx19d) delivers every example capture's calls
// to serve's pipeline over a real SQLite store in several orders, one call
// a request from one source 13 s apart (the later calls are judged late:
// behind the watermark, within allowed_lateness), and expects the findings
// (kind, severity, evidence calls) and write states of analyze of the file
// in order. Found from outside by live19: when the first call of a pair
// came late, an oddlynew copy plan blocked then replayed unchanged made no
// wasted_retry (D3), and a request_id_reuse named only the reusing call
// (D4).
func TestLateOrders_Examples(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/examples/*.ndjson")
	if len(files) == 0 {
		t.Fatal("no examples under testdata/examples")
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".ndjson"), func(t *testing.T) {
			scen, tail := exampleLines(t, path)
			eachLateOrder(t, scen, tail, nil)
		})
	}
}

// eachLateOrder delivers scen (then tail) in each of deliveryOrders' orders
// as a subtest (lateOrder), under an allowed lateness that covers them
// (lateLateness), against analyze's judgement of the calls in order. With
// check set, each order's run tells a recorder of its own, which check is
// given after the run, with that judgement.
func eachLateOrder(t *testing.T, scen, tail [][]byte, check func(t *testing.T, rec *recorder, want judged)) {
	t.Helper()
	dcfg := detect.NewDefaultConfig()
	dcfg.AllowedLateness = lateLateness(t, scen)
	want := analyzed(t, append(slices.Clone(scen), tail...), dcfg)
	names, orders := deliveryOrders(len(scen))
	// Each order runs on a store, a clock and a recorder of its own and
	// only reads scen, tail and want: the orders run in parallel (their
	// time is the engine's commit ticker and the store, not the CPU), and
	// check must be safe to call from several at once.
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var rec *recorder
			if check != nil {
				rec = newRecorder()
			}
			lateOrder(t, scen, tail, orders[name], dcfg.AllowedLateness, want, rec)
			if check != nil {
				check(t, rec, want)
			}
		})
	}
}

// lateOrder delivers scen's calls in order to a fresh pipeline, then the
// tail, and compares what the store holds with want. rec, if not nil, is
// told what the pipeline tells its sinks. It returns the run's directory,
// its store closed.
func lateOrder(t *testing.T, scen, tail [][]byte, order []int, allowed time.Duration, want judged, rec *recorder) string {
	first := decode(t, scen[order[0]:order[0]+1])[0]
	clock := newClock(first.Call.Time.Add(time.Second))
	dir := t.TempDir()
	r := openRunDetect(t, dir, clock, func(c *pipeline.Config) {}, func(c *detect.Config) {
		c.AllowedLateness = allowed
	}, rec)
	for _, i := range order {
		if _, err := r.ingest(batch(t, "exporter", scen[i])); err != nil {
			t.Fatal(err)
		}
		r.clock.Add(13 * time.Second)
		r.status()
	}
	for _, l := range tail {
		tr := decode(t, [][]byte{l})[0]
		if d := tr.Call.Time.Add(time.Second).Sub(r.clock.Now()); d > 0 {
			r.clock.Add(d)
		}
		if _, err := r.ingest(batch(t, "exporter", l)); err != nil {
			t.Fatal(err)
		}
	}
	r.steps(4, nil)
	parts := r.status()
	o := r.stop()
	got := judged{findings: map[string]string{}, writes: o.writes}
	for id, f := range o.findings {
		got.findings[id] = describe(&f)
	}
	if fmt.Sprint(got.findings) != fmt.Sprint(want.findings) {
		t.Errorf("order %v: findings\n%v\nwant (analyze, in order)\n%v", order, values(got.findings), values(want.findings))
	}
	if fmt.Sprint(got.writes) != fmt.Sprint(want.writes) {
		t.Errorf("order %v: write states\n%v\nwant\n%v", order, got.writes, want.writes)
	}
	var late int64
	for k, p := range parts {
		late += p.Late
		if p.TooLate != 0 {
			t.Errorf("%v: %d calls too late: the order is not within allowed_lateness", k, p.TooLate)
		}
	}
	if !slices.IsSorted(order) && late == 0 {
		t.Errorf("order %v: no call judged late: the test delivers nothing out of order", order)
	}
	return dir
}

func values(m map[string]string) []string {
	var out []string
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

// TestLateOrders_ReuseFirstUseNeverSeen (fx19d): a request_id_reuse the
// server reported, whose key's first use the collector never sees, is
// held while that use may still come late (allowed_lateness), then made
// with the one call, as analyze makes it; a crash while it is held
// loses nothing: the restart's replay makes it.
func TestLateOrders_ReuseFirstUseNeverSeen(t *testing.T) {
	scen, tail := exampleLines(t, "../../testdata/examples/thegram-request-reuse.ndjson")
	scen = scen[1:] // the read and the refused reuse; the first use is not seen
	want := analyzed(t, append(slices.Clone(scen), tail...), detect.NewDefaultConfig())
	if len(want.findings) != 1 {
		t.Fatalf("analyze: %v, want one request_id_reuse", want.findings)
	}
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			reuse := decode(t, scen[1:])[0]
			dir := t.TempDir()
			clock := newClock(reuse.Call.Time.Add(time.Second))
			r := openRun(t, dir, clock, nil, nil)
			for _, l := range scen {
				if _, err := r.ingest(batch(t, "exporter", l)); err != nil {
					t.Fatal(err)
				}
			}
			// Within allowed_lateness of the refusal the first use may still
			// come: nothing is made yet, though the watermark committed is
			// past the refusal.
			r.steps(3, nil)
			if o := r.read(); len(o.findings) != 0 {
				t.Fatalf("a finding made while the key's first use may still be judged: %v", o.findings)
			}
			if crash {
				r.crash()
				r = openRun(t, dir, clock, nil, nil)
			}
			r.steps(6, nil)
			o := r.stop()
			got := map[string]string{}
			for id, f := range o.findings {
				got[id] = describe(&f)
			}
			if fmt.Sprint(got) != fmt.Sprint(want.findings) {
				t.Errorf("findings %v, want (analyze) %v", values(got), values(want.findings))
			}
		})
	}
}

// TestLateOrders_ThirdPlan: a blocked copy plan replayed twice,
// delivered replay, replay, then the plan (late). Judged in order the
// wasted_retry names the plan and its first replay; live, the two replays
// were judged first and made it with each other. Left by fx19d as a known
// limit (skipped): the finding made stood beside the one the late plan
// made. lo21 withdraws it (replaced).
func TestLateOrders_ThirdPlan(t *testing.T) {
	scen, tail := exampleLines(t, "../../testdata/examples/oddlynew-copy-blocked-replay.ndjson")
	again := bytes.Replace(scen[1], []byte(`"time":"2026-11-02T09:00:28.490Z"`), []byte(`"time":"2026-11-02T09:00:38.490Z"`), 1)
	again = bytes.ReplaceAll(again, []byte(`"id":2,`), []byte(`"id":3,`))
	scen = append(scen, again)
	dcfg := detect.NewDefaultConfig()
	want := analyzed(t, append(slices.Clone(scen), tail...), dcfg)
	lateOrder(t, scen, tail, []int{1, 2, 0}, dcfg.AllowedLateness, want, nil)
}
