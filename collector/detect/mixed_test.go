package detect_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
	"github.com/mcpaudit/mcpaudit/internal/procstat"
)

// TestMixedCapture runs generated captures with thousands of interleaved
// sessions, noise and traps, and expects every planted finding and nothing
// else: recall and precision 1.
func TestMixedCapture(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			c := capgen.Generate(capgen.Config{Seed: seed, Sessions: 3000, Span: 2 * time.Hour, AnomalyRate: 0.3, NoiseRate: 0.02})
			got, rejects := runLines(t, c.Lines, false)
			// Forgetting payloads once read, as serve does, changes nothing.
			lean, _ := runLines(t, c.Lines, true)
			if fmt.Sprint(lean.findings) != fmt.Sprint(got.findings) || fmt.Sprint(lean.states()) != fmt.Sprint(got.states()) {
				t.Errorf("DropPayloads changes the findings or write states")
			}
			if rejects != c.BadLines {
				t.Errorf("rejected %d lines, want %d", rejects, c.BadLines)
			}
			if len(got.calls) != c.Calls {
				t.Errorf("processed %d calls, want %d distinct", len(got.calls), c.Calls)
			}
			used := make([]bool, len(got.findings))
			missed := 0
			for _, e := range c.Expected {
				n := 0
				for i, f := range got.findings {
					if matches(f, expected{Kind: audit.Kind(e.Kind), Server: e.Server, Document: e.Document, Key: e.Key}) {
						n++
						used[i] = true
					}
				}
				if n != 1 {
					missed++
					if missed < 10 {
						t.Errorf("expected %+v matched %d times", e, n)
					}
				}
			}
			extra := 0
			for i, f := range got.findings {
				if !used[i] {
					extra++
					if extra < 10 {
						t.Errorf("unexpected %s on %s %s: %s", f.Kind, f.Document, f.Key, f.Summary)
					}
				}
			}
			t.Logf("%d calls, %d expected findings, %d missed, %d extra; scenarios %v", c.Calls, len(c.Expected), missed, extra, c.Scenarios)
		})
	}
}

func runLines(t testing.TB, lines [][]byte, drop bool) (*sink, int) {
	s := newSink()
	d := newRunner(detect.NewDefaultConfig(), s)
	d.drop = drop
	return s, feed(t, d, bytes.Join(lines, []byte("\n")))
}

func feed(t testing.TB, d *runner, data []byte) int {
	dec, err := capture.NewDecoder(bytes.NewReader(data), "mixed")
	if err != nil {
		t.Fatal(err)
	}
	if d.drop {
		// Read, the payloads are not copied, as in analyze.
		dec.DropPayloads()
	}
	rejects := 0
	for {
		r, err := dec.NextRecord(d.r)
		if err == io.EOF {
			break
		}
		if err != nil {
			if !capture.IsReject(err) {
				t.Fatal(err)
			}
			rejects++
			continue
		}
		d.AddRecord(r)
	}
	d.Flush()
	return rejects
}

// discard is a sink that keeps nothing, for the benchmark.
type discard struct{ findings int }

func (d *discard) Call(*audit.Record)                   {}
func (d *discard) Write(*audit.Write, audit.WriteState) {}
func (d *discard) Finding(*audit.Finding)               { d.findings++ }

// BenchmarkAnalyze analyzes a generated 1M-call mixed capture (decoding
// and detection, as analyze does) and reports calls per second. Run it with
// GOMAXPROCS=1 for the one-core figure:
//
//	GOMAXPROCS=1 go test ./collector/detect -run '^$' -bench Analyze -benchtime 3x
func BenchmarkAnalyze(b *testing.B) {
	c := capgen.Generate(capgen.Config{Seed: 7, Sessions: benchSessions, Span: 24 * time.Hour, AnomalyRate: 0.1, NoiseRate: 0.002})
	data := bytes.Join(c.Lines, []byte("\n"))
	c.Lines = nil
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	cpu0 := procstat.CPU()
	for i := 0; i < b.N; i++ {
		d := newRunner(detect.NewDefaultConfig(), &discard{})
		d.drop = true // as analyze reads
		d.e.OnJudged(d.r.Recycle)
		feed(b, d, data)
	}
	b.ReportMetric(float64(c.Calls)*float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	// CPU time moves less than the wall clock with what else runs on a
	// shared machine.
	b.ReportMetric(float64(c.Calls)*float64(b.N)/(procstat.CPU()-cpu0).Seconds(), "calls/cpu-s")
	b.ReportMetric(float64(c.Calls), "calls/op")
}

// benchSessions gives about one million calls.
var benchSessions = 330_000

func benchSizeFromEnv() int {
	n, _ := strconv.Atoi(os.Getenv("MCPAUDIT_BENCH_SESSIONS"))
	return n
}

// TestSameCaptureTwice: a capture given twice (a file analyzed with itself,
// a re-sent upload) finds what it finds once: the second copy's calls are
// the same calls, however late they come.
func TestSameCaptureTwice(t *testing.T) {
	c := capgen.Generate(capgen.Config{Seed: 5, Sessions: 500, AnomalyRate: 0.3, NoiseRate: 0.0001})
	once, _ := runLines(t, c.Lines, false)
	twice, _ := runLines(t, append(append([][]byte{}, c.Lines...), c.Lines...), false)
	if fmt.Sprint(once.findings) != fmt.Sprint(twice.findings) || fmt.Sprint(once.states()) != fmt.Sprint(twice.states()) {
		t.Fatalf("findings %d vs %d", len(once.findings), len(twice.findings))
	}
}

// TestSameIDsTwoTenants: call ids are unique within a tenant; the same
// capture under two tenants is two tenants' calls, each judged in full.
func TestSameIDsTwoTenants(t *testing.T) {
	cfg := capgen.Config{Seed: 5, Sessions: 300, AnomalyRate: 0.3, Tenant: "acme"}
	a := capgen.Generate(cfg)
	cfg.Tenant = "globex"
	b := capgen.Generate(cfg)
	one, _ := runLines(t, a.Lines, false)
	both, _ := runLines(t, append(append([][]byte{}, a.Lines...), b.Lines...), false)
	if len(one.findings) == 0 || len(both.findings) != 2*len(one.findings) {
		t.Fatalf("%d findings for one tenant, %d for both (want twice)", len(one.findings), len(both.findings))
	}
}

// TestRepeatsWithinAllowance: in the live service a call sent again is
// dropped for as long as a call of its time could still be judged,
// however many calls came between; sent again later, it is too late.
func TestRepeatsWithinAllowance(t *testing.T) {
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	c := capgen.Generate(capgen.Config{Seed: 7, Sessions: 600, Start: start, Span: 10 * time.Minute, AnomalyRate: 0.3})
	recs := readRecords(t, c.Lines)
	slices.SortStableFunc(recs, func(a, b *audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	cfg := detect.NewDefaultConfig() // allowed lateness 2m
	// Each call is sent at its time; with behind set, it is sent again by
	// its source (an exporter retrying) that long after its time.
	run := func(behind time.Duration) (*detect.Stats, int) {
		type send struct {
			at time.Time
			r  *audit.Record
		}
		var sends []send
		for _, r := range recs {
			sends = append(sends, send{r.Call.Time, r})
			if behind > 0 {
				sends = append(sends, send{r.Call.Time.Add(behind), r})
			}
		}
		slices.SortStableFunc(sends, func(a, b send) int { return a.at.Compare(b.at) })
		var findings []*audit.Finding
		e := detect.NewEngine(cfg, findingSink(func(f *audit.Finding) { findings = append(findings, f) }))
		for _, s := range sends {
			e.Add("exporter", s.r, s.at.Add(time.Second))
		}
		e.Flush()
		return e.Stats(), len(findings)
	}
	base, want := run(0)
	if want == 0 {
		t.Fatal("no findings")
	}
	for _, tc := range []struct {
		name         string
		behind       time.Duration
		dup, tooLate bool
	}{
		{"within the allowance", 90 * time.Second, true, false},
		{"past the allowance", 5 * time.Minute, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, got := run(tc.behind)
			resent := int64(len(recs))
			if got != want {
				t.Errorf("%d findings, want %d", got, want)
			}
			dups := st.Duplicates - base.Duplicates
			if st.Calls != base.Calls {
				t.Errorf("%d calls judged, want %d: a repeat was judged", st.Calls, base.Calls)
			}

			if dups+st.TooLate != resent {
				t.Errorf("%d repeats dropped as duplicates and %d too late, of %d", dups, st.TooLate, resent)
			}
			if tc.dup && st.TooLate != 0 {
				t.Errorf("%d repeats too late within the allowance", st.TooLate)
			}
			// Past the allowance most repeats are too late; one sent
			// across a gap in the traffic (its source's clock had not
			// moved on) is not, and is dropped as a duplicate.
			if tc.tooLate && st.TooLate < resent/2 {
				t.Errorf("only %d of %d repeats too late", st.TooLate, resent)
			}
		})
	}
}

type findingSink func(*audit.Finding)

func (findingSink) Call(*audit.Record)                   {}
func (findingSink) Write(*audit.Write, audit.WriteState) {}
func (f findingSink) Finding(x *audit.Finding)           { f(x) }
