package pipeline_test

import (
	"bytes"
	"fmt"
	"github.com/mcpaudit/mcpaudit/audit"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// randomOrder returns a seeded random order of n calls.
func randomOrder(rng *rand.Rand, n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = i
	}
	rng.Shuffle(n, func(i, j int) { o[i], o[j] = o[j], o[i] })
	return o
}

func pick(lines [][]byte, order []int) [][]byte {
	out := make([][]byte, 0, len(order))
	for _, i := range order {
		out = append(out, lines[i])
	}
	return out
}

// TestRev19d_RandomOrders_Engine (rev19d, reviewing fx19d) judges every
// example capture's calls in random orders (seeded; not only the fixed
// permutations of TestLateOrders_Examples) as analyze does, one source,
// the out-of-order calls judged late within allowed_lateness, and expects
// the findings (kind, severity, evidence calls) and write states of the
// file in order. The mixed case takes every example's calls at once (the
// captures share their minute), so calls of several scenarios and both
// servers interleave.
func TestRev19d_RandomOrders_Engine(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/examples/*.ndjson")
	if len(files) == 0 {
		t.Fatal("no examples under testdata/examples")
	}
	var all, allTail [][]byte
	check := func(t *testing.T, scen, tail [][]byte, runs int, seed uint64) {
		dcfg := detect.NewDefaultConfig()
		dcfg.AllowedLateness = lateLateness(t, sortByTime(t, scen))
		want := analyzed(t, append(sortByTime(t, scen), tail...), dcfg)
		rng := rand.New(rand.NewPCG(seed, 19))
		for range runs {
			order := randomOrder(rng, len(scen))
			got := analyzed(t, append(pick(scen, order), tail...), dcfg)
			if fmt.Sprint(got.findings) != fmt.Sprint(want.findings) {
				t.Errorf("order %v: findings\n%s\nwant (in order)\n%s", order, strings.Join(values(got.findings), "\n"), strings.Join(values(want.findings), "\n"))
				return
			}
			if fmt.Sprint(got.writes) != fmt.Sprint(want.writes) {
				t.Errorf("order %v: write states\n%v\nwant\n%v", order, got.writes, want.writes)
				return
			}
		}
	}
	for _, path := range files {
		scen, tail := exampleLines(t, path)
		all = append(all, scen...)
		allTail = tail
		t.Run(strings.TrimSuffix(filepath.Base(path), ".ndjson"), func(t *testing.T) {
			check(t, scen, tail, 200, 1)
		})
	}
	t.Run("mixed", func(t *testing.T) {
		check(t, all, allTail, 100, 2)
	})
}

// sortByTime returns lines in the order of their calls' times.
func sortByTime(t *testing.T, lines [][]byte) [][]byte {
	recs := decode(t, lines)
	idx := make([]int, len(lines))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return recs[idx[a]].Call.Time.Before(recs[idx[b]].Call.Time) })
	return pick(lines, idx)
}

// TestRev19d_RandomOrders_Pipeline delivers every example in a few seeded
// random orders to serve's pipeline (a real SQLite store), as
// TestLateOrders_Examples does with its fixed permutations.
func TestRev19d_RandomOrders_Pipeline(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/examples/*.ndjson")
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".ndjson"), func(t *testing.T) {
			scen, tail := exampleLines(t, path)
			dcfg := detect.NewDefaultConfig()
			dcfg.AllowedLateness = lateLateness(t, scen)
			want := analyzed(t, append(slices.Clone(scen), tail...), dcfg)
			rng := rand.New(rand.NewPCG(3, uint64(len(path))))
			for i := range 3 {
				order := randomOrder(rng, len(scen))
				t.Run(fmt.Sprint(i), func(t *testing.T) {
					lateOrder(t, scen, tail, order, dcfg.AllowedLateness, want, nil)
				})
			}
		})
	}
}

// copyCall is one oddlynew call on the copy op_rev19d at 10:00:sec: a
// receipt or an apply, in state applying until retryAfter (10:01:until).
func copyCall(id int, sec int, tool string, until int) []byte {
	return copyCallOn("op_rev19d", id, sec, tool, until)
}

// copyCallOn is copyCall on the copy op.
func copyCallOn(op string, id int, sec int, tool string, until int) []byte {
	res := fmt.Sprintf(`{"operationId":"%s","state":"applying","failure":null,"nextAction":"wait_then_retry_apply","retryAfter":"2026-11-03T10:01:%02d.000Z"}`, op, until)
	esc := strings.ReplaceAll(res, `"`, `\"`)
	return fmt.Appendf(nil, `{"time":"2026-11-03T10:00:%02d.000Z","server":"oddlynew","session":"s-rev19d","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run","arguments":{"code":"async () => await organizations.%s({ operationId: \"%s\" })"}}},"duration_ms":300,"response":{"jsonrpc":"2.0","id":%d,"result":{"isError":false,"structuredContent":{"result":%s,"logs":[],"calls":[{"tool":"organizations.%s","outcome":"succeeded","count":1}]},"content":[{"type":"text","text":"%s"}]}}}`,
		sec, id, tool, op, id, res, tool, esc)
}

var rev19dTail = []byte(`{"time":"2026-11-03T10:11:00.000Z","server":"thegram","session":"s-tail","request":{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"duration_ms":51,"response":{"jsonrpc":"2.0","id":99,"result":{"isError":false,"structuredContent":{"projects":[]}}}}`)

// TestRev19d_LateReceiptPrematureOnce (rev19d, reviewing fx19d): two
// copy receipts with different retryAfters, then an apply within both
// leases. In order the apply re-sent the lease of the receipt before it:
// one premature_retry, the second receipt and the apply. Delivered
// receipt, apply, then the second receipt (late, within
// allowed_lateness), fx19d's re-judging reported the apply a second time,
// with the second receipt, beside the pair made before it came: two
// premature_retry findings for one apply where analyze of the file in
// order makes one. The apply is reported once; since lo21 the pair made
// before the late receipt is replaced by the one in order
// (docs/detection.md, Late calls; TestLateOrders_CopyUses checks the
// calls named).
func TestRev19d_LateReceiptPrematureOnce(t *testing.T) {
	scen := [][]byte{
		copyCall(1, 0, "getDocumentCopyReceipt", 0),
		copyCall(2, 5, "getDocumentCopyReceipt", 30),
		copyCall(3, 10, "applyDocumentCopy", 30),
		// A receipt of another copy, later: it moves the watermark past
		// the scenario, so a call delivered after it is judged late.
		copyCallOn("op_other", 4, 20, "getDocumentCopyReceipt", 50),
	}
	apply := decode(t, scen[2:3])[0].Call.ID
	dcfg := detect.NewDefaultConfig()
	want := analyzed(t, append(slices.Clone(scen), rev19dTail), dcfg)
	if len(want.findings) != 1 {
		t.Fatalf("in order: %v, want one premature_retry", values(want.findings))
	}
	for _, order := range [][]int{{0, 2, 3, 1}, {2, 0, 3, 1}, {1, 2, 3, 0}, {0, 2, 1, 3}} {
		got := analyzed(t, append(pick(scen, order), rev19dTail), dcfg)
		if len(got.findings) != 1 || !strings.Contains(values(got.findings)[0], "premature_retry") || !strings.Contains(values(got.findings)[0], apply+"]") {
			t.Errorf("order %v: findings\n%s\nwant one premature_retry of the apply %s, as in order\n%s", order, strings.Join(values(got.findings), "\n"), apply, strings.Join(values(want.findings), "\n"))
		}
	}
}

// copyCallAt is copyCallOn at time at, applying until until.
func copyCallAt(op string, id int, at time.Time, tool string, until time.Time) []byte {
	line := copyCallOn(op, id, 0, tool, 0)
	line = bytes.Replace(line, []byte(`"time":"2026-11-03T10:00:00.000Z"`), fmt.Appendf(nil, `"time":%q`, at.UTC().Format("2006-01-02T15:04:05.000Z")), 1)
	return bytes.ReplaceAll(line, []byte(`2026-11-03T10:01:00.000Z`), []byte(until.UTC().Format("2006-01-02T15:04:05.000Z")))
}

// BenchmarkRev19d_OneCopyPolled (rev19d, reviewing fx19d) judges n applies
// of one copy, one every 2 s, each applying with a retryAfter a minute on
// (a client polling a long copy by re-applying), each second pair swapped
// in delivery (the earlier call judged late): fx19d keeps every apply and
// receipt of a key (keyMore.leases) and judges them all again at each late
// one. ns/call growing with n is that cost:
//
//	go test ./collector/pipeline -run '^$' -bench Rev19d_OneCopyPolled -benchtime 1x
func BenchmarkRev19d_OneCopyPolled(b *testing.B) {
	for _, n := range []int{1000, 4000, 16000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			t0 := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
			lines := make([][]byte, n)
			for i := range n {
				at := t0.Add(time.Duration(i) * 2 * time.Second)
				lines[i] = copyCallAt("op_polled", i+1, at, "applyDocumentCopy", at.Add(time.Minute))
			}
			for i := 0; i+1 < n; i += 4 {
				lines[i], lines[i+1] = lines[i+1], lines[i]
			}
			recs := decode(b, lines)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for range b.N {
				e := detect.NewEngine(detect.NewDefaultConfig(), judgedSink{&judged{findings: map[string]string{}, writes: map[string]audit.WriteState{}}})
				for _, r := range recs {
					e.Add("analyze", r, time.Time{})
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(e)
				b.StartTimer()
				e.Flush()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/call")
			// What the engine holds after the last call, before the end.
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "heapB/call")
		})
	}
}

// BenchmarkRev19d_HeldReuses (rev19d, reviewing fx19d) judges n refused
// request_id reuses, 100 a second, each of its own key whose first use is
// never seen (a client whose keys were first used before the collector
// started): fx19d holds each up to allowed_lateness (2 m: 12,000 held) and
// goes over all held at each call judged. ns/call growing with the rate
// times the allowed lateness is that scan:
//
//	go test ./collector/pipeline -run '^$' -bench Rev19d_HeldReuses -benchtime 1x
func BenchmarkRev19d_HeldReuses(b *testing.B) {
	raw, err := os.ReadFile("../../testdata/examples/thegram-request-reuse.ndjson")
	if err != nil {
		b.Fatal(err)
	}
	refusal := bytes.Split(raw, []byte("\n"))[2]
	for _, n := range []int{3000, 30000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			t0 := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
			lines := make([][]byte, n)
			for i := range n {
				at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
				l := bytes.Replace(refusal, []byte(`"time":"2026-11-02T09:00:34.141Z"`), fmt.Appendf(nil, `"time":%q`, at.Format("2006-01-02T15:04:05.000Z")), 1)
				l = bytes.Replace(l, []byte(`req-bac3d5e8d362`), fmt.Appendf(nil, "req-%012d", i), 1)
				lines[i] = bytes.Replace(l, []byte(`"session":"s-b17e06a069"`), fmt.Appendf(nil, `"session":"s-%d"`, i), 1)
			}
			recs := decode(b, lines)
			var found int
			b.ResetTimer()
			for range b.N {
				j := &judged{findings: map[string]string{}, writes: map[string]audit.WriteState{}}
				e := detect.NewEngine(detect.NewDefaultConfig(), judgedSink{j})
				for _, r := range recs {
					e.Add("analyze", r, time.Time{})
				}
				e.Flush()
				found = len(j.findings)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/call")
			b.ReportMetric(float64(found), "findings")
		})
	}
}

// TestRev19d_HeldReuseAcrossStop (rev19d, reviewing fx19d): a
// request_id_reuse held for its key's first use when serve stops
// gracefully (SIGTERM: the pipeline's stop, not a crash) is made after the
// restart, as analyze makes it: once, naming the refusal.
func TestRev19d_HeldReuseAcrossStop(t *testing.T) {
	scen, tail := exampleLines(t, "../../testdata/examples/thegram-request-reuse.ndjson")
	scen = scen[1:]
	want := analyzed(t, append(slices.Clone(scen), tail...), detect.NewDefaultConfig())
	reuse := decode(t, scen[1:])[0]
	dir := t.TempDir()
	clock := newClock(reuse.Call.Time.Add(time.Second))
	r := openRun(t, dir, clock, nil, nil)
	for _, l := range scen {
		if _, err := r.ingest(batch(t, "exporter", l)); err != nil {
			t.Fatal(err)
		}
	}
	r.steps(3, nil)
	if o := r.stop(); len(o.findings) != 0 {
		t.Fatalf("made while held: %v", o.findings)
	}
	r = openRun(t, dir, clock, nil, nil)
	r.steps(6, nil)
	o := r.stop()
	got := map[string]string{}
	for id, f := range o.findings {
		got[id] = describe(&f)
	}
	if fmt.Sprint(got) != fmt.Sprint(want.findings) {
		t.Errorf("findings %v, want (analyze) %v", values(got), values(want.findings))
	}
}
