package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// rev21lPlan is an oddlynew copy plan of copy key k to org, blocked, at
// t with JSON-RPC id id (a copy of testdata/examples'
// oddlynew-copy-blocked-replay's plan).
func rev21lPlan(t *testing.T, k int, org string, at time.Time, id int) []byte {
	scen, _ := exampleLines(t, "../../testdata/examples/oddlynew-copy-blocked-replay.ndjson")
	l := bytes.ReplaceAll(scen[0], []byte("01a19b7c-a680-76ae-b358-d371cf123e51"), fmt.Appendf(nil, "01a19b7c-a680-76ae-b358-d371cf1230%02d", k))
	l = bytes.ReplaceAll(l, []byte("org_bd21a5"), []byte(org))
	return rev21lAt(l, "2026-11-02T09:00:18.795Z", at, 1, id)
}

// rev21lRefused is thegram's patch refused with E_ARGUMENT (request
// req-k), at t with id id.
func rev21lRefused(t *testing.T, k int, at time.Time, id int) []byte {
	scen, _ := exampleLines(t, "../../testdata/examples/thegram-argument-wasted.ndjson")
	l := bytes.ReplaceAll(scen[0], []byte("req-18d9970aa270"), fmt.Appendf(nil, "req-rev21l%02d", k))
	return rev21lAt(l, "2026-11-02T09:00:02.334Z", at, 1, id)
}

func rev21lAt(l []byte, from string, at time.Time, id, newID int) []byte {
	l = bytes.Replace(l, []byte(`"time":"`+from+`"`), fmt.Appendf(nil, `"time":%q`, at.UTC().Format("2006-01-02T15:04:05.000Z")), 1)
	return bytes.ReplaceAll(l, fmt.Appendf(nil, `"id":%d,`, id), fmt.Appendf(nil, `"id":%d,`, newID))
}

// rev21lMix returns n calls of mixed traffic in time order, 0.5 to 9 s
// apart: blocked plans of two copy keys to two orgs, receipts and applies
// of two copies with random retryAfters, and patches of two requests
// refused.
func rev21lMix(t *testing.T, rng *rand.Rand, n int, orgs []string) [][]byte {
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	at := t0
	var out [][]byte
	for i := range n {
		at = at.Add(time.Duration(500+rng.IntN(8500)) * time.Millisecond)
		id := 100 + i
		switch rng.IntN(4) {
		case 0:
			out = append(out, rev21lPlan(t, rng.IntN(2), orgs[rng.IntN(len(orgs))], at, id))
		case 1:
			out = append(out, rev21lRefused(t, rng.IntN(2), at, id))
		default:
			tool := []string{"getDocumentCopyReceipt", "applyDocumentCopy"}[rng.IntN(2)]
			until := at.Add(time.Duration(rng.IntN(40)) * time.Second)
			out = append(out, copyCallAt(fmt.Sprintf("op_rev21l%d", rng.IntN(2)), id, at, tool, until))
		}
	}
	return out
}

// eventSink records what the engine tells its sinks, in order, by id.
type eventSink struct {
	open    map[string]string
	made    map[string]int
	errs    []string
	nmade   map[string]int
	nwithdr map[string]int
}

func (s *eventSink) Call(*audit.Record)                   {}
func (s *eventSink) Write(*audit.Write, audit.WriteState) {}
func (s *eventSink) Finding(f *audit.Finding) {
	id := f.ID()
	if s.made[id] > 0 {
		s.errs = append(s.errs, fmt.Sprintf("finding %s (%s) made again after it was made or withdrawn", id, describe(f)))
	}
	s.made[id]++
	s.nmade[string(f.Kind)]++
	s.open[id] = describe(f)
}
func (s *eventSink) WithdrawFinding(f *audit.Finding, _ string, _ time.Time) {
	id := f.ID()
	if _, ok := s.open[id]; !ok {
		s.errs = append(s.errs, fmt.Sprintf("finding %s (%s) withdrawn, not open", id, describe(f)))
	}
	s.nwithdr[string(f.Kind)]++
	delete(s.open, id)
}

// rev21lJudge judges lines in the order given, as analyze does, and
// returns what its sinks were told.
func rev21lJudge(t *testing.T, lines [][]byte, cfg detect.Config) *eventSink {
	s := &eventSink{open: map[string]string{}, made: map[string]int{}, nmade: map[string]int{}, nwithdr: map[string]int{}}
	e := detect.NewEngine(cfg, s)
	e.DropRepeatedIDs()
	for _, r := range decode(t, lines) {
		e.Add("analyze", r, time.Time{})
	}
	e.Flush()
	return s
}

// TestRev21l_MixedOrders_Engine (rev21l, reviewing lo21) judges random
// mixed traffic (several copy keys' blocked plans, two copies' receipts
// and applies, two requests refused) in random orders within
// allowed_lateness as analyze does, and expects the open findings of the
// in-order judging; no finding made twice under one id (a stored row
// withdrawn then made again stays withdrawn), none withdrawn that is not
// open, and made less withdrawn by kind equal to the in-order count.
func TestRev21l_MixedOrders_Engine(t *testing.T) {
	t.Run("one_binding", func(t *testing.T) { rev21lMixedOrders(t, []string{"org_bd21a5"}) })
	t.Run("two_bindings", func(t *testing.T) {
		if os.Getenv("REV21L_KNOWN") == "" {
			t.Skip("known defect (rev21l D2, before lo21 too): a request_id_reuse made before the late first use of its copy key names the wrong first use and is not replaced; REV21L_KNOWN=1 runs it")
		}
		rev21lMixedOrders(t, []string{"org_bd21a5", "org_other"})
	})
}

func rev21lMixedOrders(t *testing.T, orgs []string) {
	cfg := detect.NewDefaultConfig()
	fails := 0
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(21, seed))
		lines := rev21lMix(t, rng, 4+rng.IntN(7), orgs)
		tail := []byte(strings.ReplaceAll(string(rev19dTail), "2026-11-03T10:11:00.000Z", "2026-11-02T09:30:00.000Z"))
		want := rev21lJudge(t, append(slices.Clone(lines), tail), cfg)
		order := randomOrder(rng, len(lines))
		got := rev21lJudge(t, append(pick(lines, order), tail), cfg)
		bad := fmt.Sprint(got.open) != fmt.Sprint(want.open) || len(got.errs) > 0
		net := map[string]int{}
		for k, v := range got.nmade {
			net[k] += v
		}
		for k, v := range got.nwithdr {
			net[k] -= v
		}
		wn := map[string]int{}
		for k, v := range want.nmade {
			wn[k] += v
		}
		for k, v := range want.nwithdr {
			wn[k] -= v
		}
		for k, v := range net {
			if v == 0 {
				delete(net, k)
			}
		}
		for k, v := range wn {
			if v == 0 {
				delete(wn, k)
			}
		}
		bad = bad || fmt.Sprint(net) != fmt.Sprint(wn)
		if bad {
			fails++
			if fails <= 6 {
				t.Errorf("seed %d order %v:\ngot  %v\nwant %v\nnet %v want %v\nerrs %v\nin-order errs %v", seed, order, values(got.open), values(want.open), net, wn, got.errs, want.errs)
			}
		}
	}
	if fails > 0 {
		t.Errorf("%d of 400 mixed runs differ from in order", fails)
	}
}

// TestRev21l_MixedOrders_Pipeline (rev21l, reviewing lo21) delivers
// random mixed traffic of one binding per copy key in random orders within
// allowed_lateness to serve's pipeline (a real SQLite store, the real
// metrics sink): the store's open findings are analyze's, findings_total
// less findings_withdrawn_total by kind is analyze's count, and what the
// store holds withdrawn is withdrawn with the note of a replaced finding.
func TestRev21l_MixedOrders_Pipeline(t *testing.T) {
	cfg := detect.NewDefaultConfig()
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(22, seed))
		lines := rev21lMix(t, rng, 5+rng.IntN(8), []string{"org_bd21a5"})
		tail := [][]byte{[]byte(strings.ReplaceAll(string(rev19dTail), "2026-11-03T10:11:00.000Z", "2026-11-02T09:30:00.000Z"))}
		want := analyzed(t, append(slices.Clone(lines), tail...), cfg)
		wantKinds := map[string]float64{}
		for _, d := range want.findings {
			wantKinds[strings.Fields(d)[0]]++
		}
		order := randomOrder(rng, len(lines))
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := metrics.New(reg, metrics.Options{})
			if err != nil {
				t.Fatal(err)
			}
			rec := newRecorder()
			rec.also = []audit.Sink{m}
			dir := lateOrder(t, lines, tail, order, cfg.AllowedLateness, want, rec)
			if got := netFindings(t, reg); fmt.Sprint(got) != fmt.Sprint(wantKinds) {
				t.Errorf("order %v: findings_total less findings_withdrawn_total by kind %v, want (analyze) %v", order, got, wantKinds)
			}
			checkReplaced(t, dir, want)
		})
	}
}

// TestRev21l_MixedOrders_Restart (rev21l, reviewing lo21) is
// TestRev21l_MixedOrders_Pipeline with a crash in the middle: after a
// random number of calls delivered, either the process dies with all
// committed (crash), or dies at the commit of what the next call changed
// (at_commit: the call stored and acknowledged, its findings lost); the
// restarted process takes the rest. The store should end with analyze's
// open findings. lo21 documents one such divergence: a replacement lost
// at its commit (at_commit, when the call was late and replaced a finding
// stored).
func TestRev21l_MixedOrders_Restart(t *testing.T) {
	cfg := detect.NewDefaultConfig()
	cfg.AllowedLateness = 5 * time.Minute
	late := func(c *detect.Config) { c.AllowedLateness = cfg.AllowedLateness }
	for _, atCommit := range []bool{false, true} {
		t.Run(fmt.Sprintf("at_commit=%v", atCommit), func(t *testing.T) {
			if atCommit && os.Getenv("REV21L_KNOWN") == "" {
				t.Skip("known defect (rev21l D1): after a crash at the commit of a late call that replaced nothing, a stored wasted_retry or premature_retry that a later late call replaces stays open beside its replacement (4 of 40 seeds); REV21L_KNOWN=1 runs it")
			}
			fails := 0
			for seed := range uint64(40) {
				rng := rand.New(rand.NewPCG(23, seed))
				lines := rev21lMix(t, rng, 5+rng.IntN(8), []string{"org_bd21a5"})
				tail := [][]byte{[]byte(strings.ReplaceAll(string(rev19dTail), "2026-11-03T10:11:00.000Z", "2026-11-02T09:30:00.000Z"))}
				want := analyzed(t, append(slices.Clone(lines), tail...), cfg)
				order := randomOrder(rng, len(lines))
				cut := 1 + rng.IntN(len(lines)-1)
				first := decode(t, lines[order[0]:order[0]+1])[0]
				clock := newClock(first.Call.Time.Add(time.Second))
				dir := t.TempDir()
				r := openRunDetect(t, dir, clock, nil, late, nil)
				for k, i := range order {
					if k == cut {
						if atCommit {
							r.cs.dieAtCommit.Store(true)
							if _, err := r.p.Ingest(context.Background(), batch(t, "exporter", lines[i])); err != nil {
								t.Fatal(err)
							}
							r.status()
							r.die()
							r = openRunDetect(t, dir, clock, nil, late, nil)
							r.status()
							clock.Add(13 * time.Second)
							r.status()
							continue
						}
						r.crash()
						r = openRunDetect(t, dir, clock, nil, late, nil)
						r.status()
					}
					if _, err := r.ingest(batch(t, "exporter", lines[i])); err != nil {
						t.Fatal(err)
					}
					clock.Add(13 * time.Second)
					r.status()
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
				var tooLate int64
				for _, p := range r.status() {
					tooLate += p.TooLate
				}
				r.steps(4, nil)
				o := r.stop()
				if tooLate > 0 {
					t.Errorf("seed %d: %d calls too late (not within allowed_lateness across the restart)", seed, tooLate)
				}
				got := map[string]string{}
				for id, f := range o.findings {
					got[id] = describe(&f)
				}
				if fmt.Sprint(got) != fmt.Sprint(want.findings) {
					fails++
					t.Errorf("seed %d order %v cut %d: open findings\n%v\nwant (analyze)\n%v", seed, order, cut, values(got), values(want.findings))
				}
			}
			if fails > 0 {
				t.Errorf("%d of 40 differ", fails)
			}
		})
	}
}
