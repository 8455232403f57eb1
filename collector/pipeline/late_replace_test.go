package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// moved returns line with its time from and JSON-RPC id id replaced (a
// copy of a call, sent again later).
func moved(line []byte, from, to string, id, newID int) []byte {
	l := bytes.Replace(line, []byte(`"time":"`+from+`"`), []byte(`"time":"`+to+`"`), 1)
	return bytes.ReplaceAll(l, fmt.Appendf(nil, `"id":%d,`, id), fmt.Appendf(nil, `"id":%d,`, newID))
}

// copyUses returns the oddlynew copy scenarios of testdata/examples with
// their key used three or four times: the blocked plan replayed two and
// three times, the premature apply re-sent once more within the lease,
// four applies over two leases (the third apply's receipt renews it), and
// thegram's refused patch sent again unchanged two and three times.
func copyUses(t *testing.T) map[string][2][][]byte {
	t.Helper()
	out := map[string][2][][]byte{}
	scen, tail := exampleLines(t, "../../testdata/examples/oddlynew-copy-blocked-replay.ndjson")
	r2 := moved(scen[1], "2026-11-02T09:00:28.490Z", "2026-11-02T09:00:38.490Z", 2, 3)
	r3 := moved(scen[1], "2026-11-02T09:00:28.490Z", "2026-11-02T09:00:48.490Z", 2, 4)
	out["blocked_replay_3"] = [2][][]byte{{scen[0], scen[1], r2}, tail}
	out["blocked_replay_4"] = [2][][]byte{{scen[0], scen[1], r2, r3}, tail}
	scen, tail = exampleLines(t, "../../testdata/examples/oddlynew-copy-premature.ndjson")
	a := moved(scen[1], "2026-11-02T09:00:18.659Z", "2026-11-02T09:00:30.659Z", 2, 5)
	out["premature_4"] = [2][][]byte{{scen[0], scen[1], a, scen[2]}, tail}
	out["premature_renewed_4"] = [2][][]byte{{
		copyCall(1, 0, "applyDocumentCopy", 0),
		copyCall(2, 10, "applyDocumentCopy", 0),
		copyCall(3, 20, "applyDocumentCopy", 30),
		copyCall(4, 40, "applyDocumentCopy", 30),
	}, {rev19dTail}}
	// Not a copy: the same rule for a refusal a retry cannot help
	// (fix_input), kept per request rather than per key.
	scen, tail = exampleLines(t, "../../testdata/examples/thegram-argument-wasted.ndjson")
	w2 := moved(scen[1], "2026-11-02T09:00:10.457Z", "2026-11-02T09:00:20.457Z", 2, 4)
	w3 := moved(scen[1], "2026-11-02T09:00:10.457Z", "2026-11-02T09:00:30.457Z", 2, 5)
	out["argument_wasted_3"] = [2][][]byte{{scen[0], scen[1], w2}, tail}
	out["argument_wasted_4"] = [2][][]byte{{scen[0], scen[1], w2, w3}, tail}
	return out
}

// permutations returns every order of n calls.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			out = append(out, slices.Insert(slices.Clone(p), i, n-1))
		}
	}
	return out
}

// TestLateOrders_CopyUses (lo21) delivers the oddlynew copy scenarios with
// their key used three or four times in every order to serve's pipeline
// (a real SQLite store, the real metrics sink), one call a request 13 s
// apart, all within allowed_lateness, and expects what analyze of the
// file in order gives (and analyze of the lines in that order gives too): the open findings and write states in the store;
// mcpaudit_findings_total less mcpaudit_findings_withdrawn_total, by kind,
// the findings analyze gives; and each finding the store holds withdrawn
// one analyze does not give, withdrawn by mcpaudit with the note of a
// replaced finding. Until lo21 a wasted_retry or premature_retry made
// before the late first call of its key stood beside the one judging in
// order makes (docs/detection.md, Late calls).
func TestLateOrders_CopyUses(t *testing.T) {
	uses := copyUses(t)
	for _, name := range sortedKeys(uses) {
		scen, tail := uses[name][0], uses[name][1]
		t.Run(name, func(t *testing.T) {
			dcfg := detect.NewDefaultConfig()
			dcfg.AllowedLateness = lateLateness(t, scen)
			want := analyzed(t, append(slices.Clone(scen), tail...), dcfg)
			if len(want.findings) == 0 {
				t.Fatal("analyze makes no finding: the test shows nothing")
			}
			wantKinds := map[string]float64{}
			for _, d := range want.findings {
				wantKinds[strings.Fields(d)[0]]++
			}
			for _, order := range permutations(len(scen)) {
				t.Run(strings.Trim(strings.ReplaceAll(fmt.Sprint(order), " ", "_"), "[]"), func(t *testing.T) {
					// Each order has its own registry, recorder and store
					// and only reads scen, tail and want: in parallel.
					t.Parallel()
					// analyze of the lines in this order (one source,
					// judged late within allowed_lateness) gives the same.
					if got := analyzed(t, append(pick(scen, order), tail...), dcfg); fmt.Sprint(got.findings) != fmt.Sprint(want.findings) {
						t.Errorf("analyze of order %v: findings\n%v\nwant (in order)\n%v", order, values(got.findings), values(want.findings))
					}
					reg := prometheus.NewRegistry()
					m, err := metrics.New(reg, metrics.Options{})
					if err != nil {
						t.Fatal(err)
					}
					rec := newRecorder()
					rec.also = []audit.Sink{m}
					dir := lateOrder(t, scen, tail, order, dcfg.AllowedLateness, want, rec)
					if got := netFindings(t, reg); fmt.Sprint(got) != fmt.Sprint(wantKinds) {
						t.Errorf("order %v: findings_total less findings_withdrawn_total by kind %v, want (analyze) %v", order, got, wantKinds)
					}
					checkReplaced(t, dir, want)
				})
			}
		})
	}
}

// netFindings returns, by kind, mcpaudit_findings_total less
// mcpaudit_findings_withdrawn_total, leaving out kinds at zero.
func netFindings(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	net := map[string]float64{}
	for _, mf := range mfs {
		sign := 0.0
		switch mf.GetName() {
		case metrics.FindingsTotal:
			sign = 1
		case metrics.FindingsWithdrawnTotal:
			sign = -1
		default:
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == "kind" {
					net[lp.GetValue()] += sign * mt.GetCounter().GetValue()
				}
			}
		}
	}
	for k, v := range net {
		if v == 0 {
			delete(net, k)
		}
	}
	return net
}

// checkReplaced fails unless each finding the store in dir holds
// withdrawn is one analyze does not give, withdrawn by mcpaudit with the
// note of a replaced finding.
func checkReplaced(t *testing.T, dir string, want judged) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	pg, err := st.Findings(ctx, audit.FindingQuery{State: audit.FindingWithdrawn, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range pg.Findings {
		if _, ok := want.findings[f.ID()]; ok {
			t.Errorf("finding %s (%s) withdrawn, which analyze gives", f.ID(), describe(&f))
		}
		h, err := st.FindingHistory(ctx, f.ID(), f.Tenant)
		if err != nil {
			t.Fatal(err)
		}
		last := h[len(h)-1]
		if last.By != "mcpaudit" || !strings.Contains(last.Note, "replaced by the finding") {
			t.Errorf("finding %s withdrawn by %q with note %q, want mcpaudit's note of a replaced finding", f.ID(), last.By, last.Note)
		}
	}
}

// TestLateOrders_ReplacedAcrossRestart (lo21): a blocked copy plan
// replayed twice, the two replays delivered and their wasted_retry
// committed, then the process dies; the plan comes late (within
// allowed_lateness) to the restarted process. With the crash before the
// plan came (committed), the restart's replay passes over the calls and
// finding committed, and the late plan withdraws the stored finding and
// makes analyze's. With the crash at the commit of what the late plan
// changed (at_replacement: the plan stored and acknowledged, the
// withdrawal and the new finding lost), the restart's replay judges the
// stored calls in time order, and the store should end with analyze's
// findings open either way. at_replacement is skipped, a known limit
// lo21 leaves (docs/detection.md, Late calls): the replay makes the plan's
// finding in order but takes it as committed (the mark covers its
// calls), and does not know the stored replays' finding to withdraw it;
// the store keeps the replays' finding open and lacks analyze's.
func TestLateOrders_ReplacedAcrossRestart(t *testing.T) {
	uses := copyUses(t)
	scen, tail := uses["blocked_replay_3"][0], uses["blocked_replay_3"][1]
	dcfg := detect.NewDefaultConfig()
	want := analyzed(t, append(slices.Clone(scen), tail...), dcfg)
	for _, atReplacement := range []bool{false, true} {
		t.Run(fmt.Sprintf("at_replacement=%v", atReplacement), func(t *testing.T) {
			first := decode(t, scen[1:2])[0]
			clock := newClock(first.Call.Time.Add(time.Second))
			dir := t.TempDir()
			// No ticker: the state file holds what the steps below
			// committed, the exporter still delivering, so the restart
			// holds the partition at what it had delivered and the plan
			// comes late, within allowed_lateness. With the 10 ms ticker a
			// tick could save the file after the steps, the exporter quiet
			// and the watermark moved on with the wall clock to 09:02:20.49:
			// the restart went on from there and counted the plan too late
			// (CI under the race detector on d79f18c, then skipped as
			// "judged in order"; found by fl22a with a tick sent after the
			// steps, 2026-12-06).
			r := openRun(t, dir, clock, func(c *pipeline.Config) { pipeline.SetTicks(c, make(chan time.Time)) }, nil)
			for _, i := range []int{1, 2} {
				if _, err := r.ingest(batch(t, "exporter", scen[i])); err != nil {
					t.Fatal(err)
				}
				clock.Add(13 * time.Second)
				r.status()
			}
			r.steps(3, nil)
			before := r.read()
			if len(before.findings) != 1 {
				t.Fatalf("stored before the plan came: %v, want the replays' wasted_retry: the test shows nothing", before.findings)
			}
			for id := range before.findings {
				if _, ok := want.findings[id]; ok {
					t.Fatalf("the replays' finding %s is analyze's: the test shows nothing", id)
				}
			}
			if atReplacement {
				t.Skip("known limit (lo21): a replacement lost in a crash at its commit is not made at the restart; docs/detection.md, Late calls")
				r.cs.dieAtCommit.Store(true)
				if _, err := r.p.Ingest(context.Background(), batch(t, "exporter", scen[0])); err != nil {
					t.Fatal(err)
				}
				r.status() // the engine judges the plan; its commit dies
				r.die()
				r = openRun(t, dir, clock, nil, nil)
			} else {
				r.crash()
				r = openRun(t, dir, clock, nil, nil)
				r.status()
				if _, err := r.ingest(batch(t, "exporter", scen[0])); err != nil {
					t.Fatal(err)
				}
				if st := r.status()[detect.PartitionKey{Server: "oddlynew"}]; st.Late != 1 || st.TooLate != 0 {
					t.Fatalf("the plan was judged late %d times, too late %d times (watermark %s), want late once: the test shows nothing", st.Late, st.TooLate, st.Watermark)
				}
			}
			for _, l := range tail {
				tr := decode(t, [][]byte{l})[0]
				if d := tr.Call.Time.Add(time.Second).Sub(clock.Now()); d > 0 {
					clock.Add(d)
				}
				if _, err := r.ingest(batch(t, "exporter", l)); err != nil {
					t.Fatal(err)
				}
			}
			r.steps(4, nil)
			o := r.stop()
			got := map[string]string{}
			for id, f := range o.findings {
				got[id] = describe(&f)
			}
			if fmt.Sprint(got) != fmt.Sprint(want.findings) {
				t.Errorf("after the restart: open findings\n%v\nwant (analyze)\n%v", values(got), values(want.findings))
			}
			checkReplaced(t, dir, want)
		})
	}
}
