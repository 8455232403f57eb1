package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/report"
	"github.com/mcpaudit/mcpaudit/rules"
	"github.com/mcpaudit/mcpaudit/rules/promtest"
)

// TestSLI_RestartRejudgingCountsTheMove (wd21; sli20, review rev20s): the
// run judges live18's reproA as TestSLI_MetricsMatchReport does (a write
// committed unverified with its unverified_write, then the replay dated
// within its window judged late, which proves it resolved), and dies at
// the commit that would store the move and the finding's withdrawal. The
// restart judges the stored calls in time order, settles the write from
// pending and withdraws the stored finding. Each process exports its own
// counters (a real metrics sink each); Prometheus sees the first's, then
// a reset, then the second's. The generated recording rules in a real
// promtool, over a range holding both, must give the SLI `mcpaudit
// report` gives from the store: 1 bad (a write left unverified) in 3.
// Until wd21 the dead run had counted the move (told at once, lost with
// the commit) and the restart counted the write resolved anew, with no
// move out of unverified: the rules read 0 bad in 4 when the dead run's
// move was scraped (this test's case), 2 bad in 4 when it was not.
func TestSLI_RestartRejudgingCountsTheMove(t *testing.T) {
	promtool := promtest.Binary(t, "promtool")
	s := newLateReplay(20 * time.Second)
	newSink := func() (*prometheus.Registry, *recorder) {
		reg := prometheus.NewRegistry()
		m, err := metrics.New(reg, metrics.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		rec.also = []audit.Sink{m}
		return reg, rec
	}
	reg1, rec1 := newSink()
	clock := newClock(wallStart)
	runDir := t.TempDir()
	r := openRunDetect(t, runDir, clock, nil, s.dedit, rec1)
	s.others = append(s.others, pendingPatchLine("s-c", 7, wallStart.Add(-s.vw-30*time.Second), "ops/b.gram"))
	open := s.closeWindow(t, r, clock)
	s.sendReplay(t, r, clock, &r.cs.dieAtCommit)
	r.die()
	series1 := scrapeWrites(t, reg1)

	reg2, rec2 := newSink()
	r = openRunDetect(t, runDir, clock, nil, s.dedit, rec2)
	clock.Add(10 * time.Minute)
	if _, err := r.ingest(batch(t, "calls:reproA", s.tail)); err != nil {
		t.Fatal(err)
	}
	r.steps(20, nil)
	if f := findingByID(t, r, open[0]); f.StateOf() != audit.FindingWithdrawn {
		t.Fatalf("after the restart the finding is %s, want withdrawn: the test shows nothing", f.StateOf())
	}
	if n := len(openFindings(r.stop())); n != 1 {
		t.Fatalf("%d open findings, want the unverified_write of the write left unverified", n)
	}
	series2 := scrapeWrites(t, reg2)

	st, err := sqlite.Open(filepath.Join(runDir, "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rep, err := report.Build(context.Background(), st, report.Query{Window: 24 * time.Hour, WindowName: "1d",
		Until: clock.Now().Add(time.Hour), Target: 0.999, SkipClients: true, SkipFailures: true})
	if err != nil {
		t.Fatal(err)
	}
	bad, counted := report.Bad(rep.Counts), report.Counted(rep.Counts)
	if bad != 1 || counted != 3 {
		t.Fatalf("report: bad %d in %d (counts %v), want 1 in 3: the test shows nothing", bad, counted, rep.Counts)
	}

	// Each series: 0 at 0m (made at zero), the dead run's value at 1m, 0 at
	// 2m (the new process makes it at zero), the restart's at 3m; a series
	// one process lacks stays 0 there. rate() extrapolates nothing (each
	// run's first sample is 0, the last is at the evaluation), so the
	// recordings times 300 are the counts over both runs.
	vals := map[string][2]float64{}
	var names []string
	for i, ss := range [][]scraped{series1, series2} {
		for _, sr := range ss {
			v, ok := vals[sr.name]
			if !ok {
				names = append(names, sr.name)
			}
			v[i] = sr.value
			vals[sr.name] = v
		}
	}
	var in strings.Builder
	for _, n := range names {
		fmt.Fprintf(&in, "      - series: '%s'\n        values: '0 %g 0 %g'\n", n, vals[n][0], vals[n][1])
	}
	dir := t.TempDir()
	out, err := rules.Render(rules.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	job := `{job="mcpaudit",server="thegram"}`
	test := fmt.Sprintf(`rule_files:
  - rules.yaml
evaluation_interval: 1m
group_eval_order:
  - mcpaudit-write-durability-sli
tests:
  - interval: 1m
    input_series:
%s    promql_expr_test:
      - expr: round(%s * 300)
        eval_time: 3m
        exp_samples:
          - labels: '%s'
            value: %d
      - expr: round(%s * 300)
        eval_time: 3m
        exp_samples:
          - labels: '%s'
            value: %d
`, in.String(), rules.ErrorRate(5*time.Minute), job, bad, rules.CountedRate(5*time.Minute), job, counted+1)
	if err := os.WriteFile(filepath.Join(dir, "sli_test.yaml"), []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "sli_test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the recording rules over the two runs' counters disagree with the report (bad %d in %d, counts %v): %v\n%s\ninput:\n%s",
			bad, counted, rep.Counts, err, out, in.String())
	}
}
