package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
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

// TestSLI_MetricsMatchReport: the write counters of a pipeline run over a
// real SQLite store, read by the generated recording rules in a real
// promtool, give the SLI that `mcpaudit report` gives from the store over
// the same calls (sli20; found by the lead and fx19w). The run holds
// live18's reproA (a canceled write whose window closes unverified, its
// unverified_write committed, then the accepted replay under its key,
// dated within the window, judged late: it proves the write resolved and
// is durable itself) and a write accepted with sync pending that no read
// confirms (it stands unverified). The store holds each write once, by its
// latest state: 1 bad in 3. On main (2cf684b) the counters said
// unverified 2, resolved 1, durable 1, and the rules 2 bad in 4: the write
// proven late counted once bad and once good.
func TestSLI_MetricsMatchReport(t *testing.T) {
	promtool := promtest.Binary(t, "promtool")
	s := newLateReplay(20 * time.Second)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	rec.also = []audit.Sink{m}
	clock := newClock(wallStart)
	runDir := t.TempDir()
	r := openRunDetect(t, runDir, clock, nil, s.dedit, rec)
	s.others = append(s.others, pendingPatchLine("s-c", 7, wallStart.Add(-s.vw-30*time.Second), "ops/b.gram"))
	s.closeWindow(t, r, clock)
	var noFault atomic.Bool
	s.sendReplay(t, r, clock, &noFault)
	clock.Add(10 * time.Minute)
	if _, err := r.ingest(batch(t, "calls:reproA", s.tail)); err != nil {
		t.Fatal(err)
	}
	r.steps(20, nil)
	if n := len(openFindings(r.stop())); n != 1 {
		t.Fatalf("%d open findings, want the unverified_write of the write left unverified", n)
	}

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

	series := scrapeWrites(t, reg)
	dir := t.TempDir()
	out, err := rules.Render(rules.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	// Each counter is 0 at 0m (its series made at zero, as the metrics make
	// them) and its value at 1m: rate() extrapolates nothing, so the
	// recordings times 300 are the counts over the 5 minutes.
	var in strings.Builder
	for _, sr := range series {
		fmt.Fprintf(&in, "      - series: '%s'\n        values: '0 %g'\n", sr.name, sr.value)
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
        eval_time: 1m
        exp_samples:
          - labels: '%s'
            value: %d
      - expr: round(%s * 300)
        eval_time: 1m
        exp_samples:
          - labels: '%s'
            value: %d
      - expr: round(%s * %d)
        eval_time: 1m
        exp_samples:
          - labels: '%s'
            value: %d
`, in.String(), rules.ErrorRate(5*time.Minute), job, bad, rules.CountedRate(5*time.Minute), job, counted,
		rules.ErrorRatio(rules.LevelServer, 5*time.Minute), counted, job, bad)
	if err := os.WriteFile(filepath.Join(dir, "sli_test.yaml"), []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "sli_test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the recording rules over the run's counters disagree with the report (bad %d in %d, counts %v): %v\n%s\ninput:\n%s",
			bad, counted, rep.Counts, err, out, in.String())
	}
}

type scraped struct {
	name  string
	value float64
}

// scrapeWrites returns the WritesTotal and WritesRejudgedTotal series of
// reg as promtool input series, with the job and instance labels a scrape
// adds.
func scrapeWrites(t *testing.T, reg *prometheus.Registry) []scraped {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []scraped
	for _, mf := range mfs {
		if mf.GetName() != metrics.WritesTotal && mf.GetName() != metrics.WritesRejudgedTotal {
			continue
		}
		for _, mt := range mf.GetMetric() {
			labels := []string{`job="mcpaudit"`, `instance="127.0.0.1:9464"`}
			for _, lp := range mt.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			sort.Strings(labels)
			out = append(out, scraped{mf.GetName() + "{" + strings.Join(labels, ",") + "}", mt.GetCounter().GetValue()})
		}
	}
	if !slices.ContainsFunc(out, func(s scraped) bool { return s.value > 0 }) {
		t.Fatal("no write counted: the test shows nothing")
	}
	return out
}
