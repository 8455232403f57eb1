package detect_test

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// delivered is one call as a source delivers it: when (wall time) and on
// which stream.
type delivered struct {
	rec    *audit.Record
	source string
	wall   time.Time
}

// outcome is what an engine concluded: its findings by id, and the final
// state of every write.
type outcome struct {
	findings map[string]audit.Finding
	states   map[string]audit.WriteState
	stats    detect.Stats
	// twice lists what a sink was told twice (a finding standing told
	// again, a withdrawal of a finding not standing): a store counts
	// each (mcpaudit_findings_total, withdrawn), so each is told once.
	twice []string
}

type outcomeSink struct{ o *outcome }

func (s outcomeSink) Call(*audit.Record) {}
func (s outcomeSink) Write(w *audit.Write, _ audit.WriteState) {
	s.o.states[fmt.Sprintf("%s/%d", w.CallID, w.Seq)] = w.State
}
func (s outcomeSink) Finding(f *audit.Finding) {
	if _, ok := s.o.findings[f.ID()]; ok {
		s.o.twice = append(s.o.twice, fmt.Sprintf("finding %s %v told again", f.Kind, f.Calls))
	}
	s.o.findings[f.ID()] = *f
}

// WithdrawFinding takes back a finding, as a store marks it withdrawn.
func (s outcomeSink) WithdrawFinding(f *audit.Finding, _ string, _ time.Time) {
	if _, ok := s.o.findings[f.ID()]; !ok {
		s.o.twice = append(s.o.twice, fmt.Sprintf("withdrawal of %s %v not standing", f.Kind, f.Calls))
	}
	delete(s.o.findings, f.ID())
}

func newOutcome() *outcome {
	return &outcome{findings: map[string]audit.Finding{}, states: map[string]audit.WriteState{}}
}

// readRecords decodes a capture into records, in file order.
func readRecords(t testing.TB, lines [][]byte) []*audit.Record {
	dec, err := capture.NewDecoder(bytes.NewReader(bytes.Join(lines, []byte("\n"))), "capture")
	if err != nil {
		t.Fatal(err)
	}
	r := dialect.NewReader(dialect.Config{})
	var recs []*audit.Record
	for {
		c, err := dec.Next()
		if err == io.EOF {
			return recs
		}
		if err != nil {
			continue // bad lines are the capture's noise
		}
		recs = append(recs, r.Read(c))
	}
}

// inOrder judges records as analyze does: one source, no wall clock.
func inOrder(recs []*audit.Record) *outcome { return inOrderCfg(recs, detect.NewDefaultConfig()) }

func inOrderCfg(recs []*audit.Record, cfg detect.Config) *outcome {
	o := newOutcome()
	e := detect.NewEngine(cfg, outcomeSink{o})
	e.DropRepeatedIDs()
	for _, r := range recs {
		e.Add("file", r, time.Time{})
	}
	e.Flush()
	return o
}

// live judges deliveries as the live service does: in arrival order, with
// a wall clock that ticks every 200 ms, then an hour of quiet so that
// every window closes.
func live(cfg detect.Config, ds []delivered, opts ...func(*detect.Engine)) *outcome {
	o := newOutcome()
	e := detect.NewEngine(cfg, outcomeSink{o})
	for _, opt := range opts {
		opt(e)
	}
	defer func() { o.stats = *e.Stats() }()
	e.DropRepeatedIDs()
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].wall.Before(ds[j].wall) })
	var tick time.Time
	for _, d := range ds {
		for !tick.IsZero() && tick.Before(d.wall) {
			e.Tick(tick)
			tick = tick.Add(200 * time.Millisecond)
		}
		if tick.IsZero() {
			tick = d.wall
		}
		e.Add(d.source, d.rec, d.wall)
	}
	end := ds[len(ds)-1].wall
	for i := 0; i < 7200; i++ {
		end = end.Add(time.Second)
		e.Tick(end)
	}
	return o
}

// compare reports what differs between two outcomes.
func compare(t *testing.T, name string, want, got *outcome) {
	t.Helper()
	var missing, extra []string
	for id, f := range want.findings {
		if _, ok := got.findings[id]; !ok {
			missing = append(missing, fmt.Sprintf("%s %s %v", f.Kind, f.Document, f.Calls))
		}
	}
	var differ []string
	for id, f := range got.findings {
		w, ok := want.findings[id]
		if !ok {
			extra = append(extra, fmt.Sprintf("%s %s %v: %s", f.Kind, f.Document, f.Calls, f.Summary))
			continue
		}
		// The same finding says the same: a call judged late must not
		// lose what judging in order would have written of it.
		a, b := w, f
		a.Status, b.Status = nil, nil // where a store keeps it: a pointer, and not the finding's content
		if wj, gj := fmt.Sprintf("%+v", a), fmt.Sprintf("%+v", b); wj != gj {
			differ = append(differ, fmt.Sprintf("%s %s\n    want %s\n    got  %s", f.Kind, f.Document, wj, gj))
		}
	}
	states := 0
	for k, s := range want.states {
		if got.states[k] != s {
			states++
			if states <= 5 {
				t.Errorf("%s: write %s is %s, want %s", name, k, got.states[k], s)
			}
		}
	}
	// A call judged that judging in order drops (a second observation
	// taken for another call) has writes of its own.
	for k, s := range got.states {
		if _, ok := want.states[k]; !ok {
			states++
			if states <= 5 {
				t.Errorf("%s: write %s is %s, and no write in order", name, k, s)
			}
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	sort.Strings(differ)
	if len(differ) > 0 {
		t.Errorf("%s: %d findings differ from judging in order:\n  %s", name, len(differ), strings.Join(first(differ, 5), "\n  "))
	}
	if len(missing)+len(extra) > 0 || states > 0 {
		t.Errorf("%s: %d findings; %d missing, %d extra, %d write states differ\nmissing:\n  %s\nextra:\n  %s", name, len(want.findings),
			len(missing), len(extra), states, strings.Join(first(missing, 10), "\n  "), strings.Join(first(extra, 10), "\n  "))
	}
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

func hashOf(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// observedAt returns r as another observer saw it, at time t: the same
// exchange under another call id.
func observedAt(r *audit.Record, t time.Time) *audit.Record {
	c := *r.Call
	c.Time, c.ID = t, "other-"+c.ID
	o := *r
	o.Call = &c
	return &o
}

// endOf is when a call's span ends: an exporter sends it then.
func endOf(r *audit.Record) time.Time { return r.Call.Time.Add(r.Call.Duration) }

// TestDelivery replays generated mixed captures the ways production
// delivers them and expects the findings and write states that judging the
// same calls in time order gives.
func TestDelivery(t *testing.T) {
	cfg := detect.NewDefaultConfig()
	for _, seed := range []int64{11, 12, 13} {
		c := capgen.Generate(capgen.Config{Seed: seed, Sessions: 1500, Span: 30 * time.Minute, AnomalyRate: 0.35, NoiseRate: 0.01})
		recs := readRecords(t, c.Lines)
		want := inOrder(recs)
		observedTwice := map[string]bool{}
		count := map[string]int{}
		for _, r := range recs {
			if count[r.Call.Fingerprint]++; count[r.Call.Fingerprint] > 1 {
				observedTwice[r.Call.Fingerprint] = true
			}
		}
		if len(want.findings) < 100 {
			t.Fatalf("seed %d: only %d findings in order", seed, len(want.findings))
		}
		patterns := map[string]func() []delivered{
			// One exporter per server, each sending its spans in batches
			// when they end; both at full speed.
			"two_providers_at_end": func() []delivered {
				var ds []delivered
				for _, r := range recs {
					ds = append(ds, delivered{r, r.Call.Server, endOf(r).Add(2 * time.Second)})
				}
				return ds
			},
			// Calls delivered in start order by one poster per server.
			"two_posters": func() []delivered {
				var ds []delivered
				for _, r := range recs {
					ds = append(ds, delivered{r, "post-" + r.Call.Server, r.Call.Time.Add(time.Second)})
				}
				return ds
			},
			// The oddlynew exporter is 10 minutes behind.
			"one_source_lagging_10m": func() []delivered {
				var ds []delivered
				for _, r := range recs {
					lag := time.Second
					if strings.HasPrefix(r.Call.Server, "oddlynew") {
						lag = 10 * time.Minute
					}
					ds = append(ds, delivered{r, r.Call.Server, endOf(r).Add(lag)})
				}
				return ds
			},
			// Three pods per server, sessions spread over them, each pod
			// exporting on its own with its own delay.
			"pods_exporting_separately": func() []delivered {
				var ds []delivered
				for _, r := range recs {
					pod := hashOf(r.Call.Session) % 3
					ds = append(ds, delivered{r, fmt.Sprintf("%s/pod-%d", r.Call.Server, pod), endOf(r).Add(time.Duration(1+2*pod) * time.Second)})
				}
				return ds
			},
			// One pod's exporter sends an hour ahead of the wall clock.
			"source_clock_an_hour_ahead": func() []delivered {
				var ds []delivered
				for _, r := range recs {
					pod := hashOf(r.Call.Session) % 2
					wall := endOf(r).Add(time.Second)
					if pod == 1 && r.Call.Server == "thegram" {
						wall = wall.Add(-time.Hour) // its calls look an hour ahead of this wall clock
					}
					ds = append(ds, delivered{r, fmt.Sprintf("%s/pod-%d", r.Call.Server, pod), wall})
				}
				return ds
			},
			// One pod stops sending for 90 s (its exporter stalled: the
			// partition moves on with the other pod), then sends its
			// backlog, which arrives behind the watermark.
			"idle_pod_then_backlog": func() []delivered {
				stall := recs[0].Call.Time.Add(10 * time.Minute)
				resume := stall.Add(90 * time.Second)
				var ds []delivered
				for _, r := range recs {
					pod := hashOf(r.Call.Session) % 2
					wall := endOf(r).Add(time.Second)
					if pod == 1 && !wall.Before(stall) && wall.Before(resume) {
						wall = resume.Add(time.Duration(r.Call.Time.Sub(stall)) / 100)
					}
					ds = append(ds, delivered{r, fmt.Sprintf("%s/pod-%d", r.Call.Server, pod), wall})
				}
				return ds
			},
			// Each span is delayed by up to 3 s at random: batches overlap.
			// (Two observations of one exchange keep their order: the
			// later one, dropped, cannot be told apart once the earlier is
			// judged; see docs/detection.md.)
			"jittered_batches": func() []delivered {
				rng := rand.New(rand.NewSource(seed))
				var ds []delivered
				for _, r := range recs {
					wall := endOf(r)
					if !observedTwice[r.Call.Fingerprint] {
						wall = wall.Add(time.Duration(rng.Int63n(int64(3 * time.Second))))
					}
					ds = append(ds, delivered{r, r.Call.Server, wall})
				}
				return ds
			},
			// The second observation of an exchange comes from another
			// observer (a client-side proxy), 5 s later.
			"two_observers": func() []delivered {
				var ds []delivered
				taken := map[string]bool{}
				for _, r := range recs {
					src, delay := "server-"+r.Call.Server, time.Second
					if observedTwice[r.Call.Fingerprint] && taken[r.Call.Fingerprint] {
						src, delay = "proxy-"+r.Call.Server, 5*time.Second
					}
					taken[r.Call.Fingerprint] = true
					ds = append(ds, delivered{r, src, endOf(r).Add(delay)})
				}
				return ds
			},
			// The second observer stalls for 60 s (past the idle timeout:
			// the partition moves on without it), then sends its backlog:
			// second observations long after the first were judged, but
			// within the allowance.
			"two_observers_one_stalled": func() []delivered {
				stall := recs[0].Call.Time.Add(5 * time.Minute)
				resume := stall.Add(time.Minute)
				var ds []delivered
				taken := map[string]bool{}
				for _, r := range recs {
					src, wall := "server-"+r.Call.Server, endOf(r).Add(time.Second)
					if observedTwice[r.Call.Fingerprint] && taken[r.Call.Fingerprint] {
						// The proxy's clock reads 300 ms later: another
						// time, so another call id, for the same exchange.
						r = observedAt(r, r.Call.Time.Add(300*time.Millisecond))
						src, wall = "proxy-"+r.Call.Server, endOf(r).Add(2*time.Second)
						if !wall.Before(stall) && wall.Before(resume) {
							wall = resume.Add(time.Duration(r.Call.Time.Sub(stall)) / 100)
						}
					}
					taken[r.Call.Fingerprint] = true
					ds = append(ds, delivered{r, src, wall})
				}
				return ds
			},
		}
		names := make([]string, 0, len(patterns))
		for n := range patterns {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, name := range names {
			t.Run(fmt.Sprintf("seed%d/%s", seed, name), func(t *testing.T) {
				got := live(cfg, patterns[name]())
				compare(t, name, want, got)
				t.Logf("%d findings; %d late calls, %d too late, %d ahead", len(got.findings), got.stats.Late, got.stats.TooLate, got.stats.Ahead)
			})
		}
	}
}

// TestDeliveryExamples delivers each example capture as two exporters (one
// per server) sending spans when they end, and expects the findings of
// judging the file in order.
func TestDeliveryExamples(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/examples/*.ndjson")
	if len(files) == 0 {
		t.Fatal("no examples under testdata/examples")
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".ndjson"), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			recs := readRecords(t, bytes.Split(bytes.TrimSpace(raw), []byte("\n")))
			want := inOrder(recs)
			var ds []delivered
			for _, r := range recs {
				ds = append(ds, delivered{r, r.Call.Server, endOf(r).Add(time.Second)})
			}
			got := live(detect.NewDefaultConfig(), ds)
			compare(t, "at_end", want, got)
		})
	}
}

// TestDelivery_SlowClockQuietSpell: two pods per server, the second with a
// clock 3 minutes slow (within max_clock_lag: it holds its server back by
// that much), and a spell of 12 s, longer than idle_timeout, in which no
// pod delivers anything (the calls that would have been delivered then
// are left out of both runs). The findings and write states must be those
// of judging the same calls in time order. Before, the watermark moved on
// during the spell with the pod whose clock is right, and every call the
// slow pod sent after it was later than allowed_lateness: not judged.
func TestDelivery_SlowClockQuietSpell(t *testing.T) {
	const slow = 3 * time.Minute
	for _, seed := range []int64{21, 22} {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			c := capgen.Generate(capgen.Config{Seed: seed, Sessions: 1500, Span: 30 * time.Minute, AnomalyRate: 0.35, NoiseRate: 0.01})
			all := readRecords(t, c.Lines)
			spell := all[0].Call.Time.Add(12 * time.Minute)
			// Each server's pods start together, when the slow one's first
			// call begins (one that joins later, as far behind, is too late:
			// TestSourceTooFarBehindHoldsNothing).
			begin := map[string]time.Time{}
			for _, r := range all {
				if _, ok := begin[r.Call.Server]; !ok && hashOf(r.Call.Session)%2 == 1 {
					begin[r.Call.Server] = r.Call.Time.Add(slow)
				}
			}
			var recs []*audit.Record
			var ds []delivered
			for _, r := range all {
				pod := hashOf(r.Call.Session) % 2
				real := r.Call.Time // when the call began, by a right clock
				if pod == 1 {
					real = real.Add(slow)
				}
				// A call that began up to 40 s before the spell (the longest
				// lasts 30 s) would be delivered in it.
				if real.Before(begin[r.Call.Server]) ||
					!real.Before(spell.Add(-40*time.Second)) && real.Before(spell.Add(12*time.Second)) {
					continue
				}
				recs = append(recs, r)
				ds = append(ds, delivered{r, fmt.Sprintf("%s/pod-%d", r.Call.Server, pod), real.Add(r.Call.Duration + time.Second)})
			}
			want := inOrder(recs)
			got := live(detect.NewDefaultConfig(), ds, func(e *detect.Engine) { e.ClockPerPartition() })
			compare(t, "slow_clock_quiet_spell", want, got)
			if got.stats.TooLate != 0 {
				t.Errorf("%d calls too late, want none", got.stats.TooLate)
			}
			t.Logf("%d findings; %d late calls, %d too late", len(got.findings), got.stats.Late, got.stats.TooLate)
		})
	}
}
