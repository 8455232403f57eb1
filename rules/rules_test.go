package rules_test

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/exporter/notify"
	"github.com/mcpaudit/mcpaudit/rules"
	"github.com/mcpaudit/mcpaudit/rules/promtest"
	"github.com/mcpaudit/mcpaudit/web"
)

const (
	rulesFile = "../deploy/prometheus/rules.yaml"
	testFile  = "testdata/rules_test.yaml"
	runbooks  = "../docs/runbooks.md"
)

func build(t *testing.T, o rules.Options) *rules.File {
	t.Helper()
	f, err := rules.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestGeneratedInSync(t *testing.T) {
	want, err := rules.Render(rules.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatalf("%v: run go generate ./rules", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from what rules.Build renders: run go generate ./rules (or make generate)", rulesFile)
	}
}

// TestPrometheusRuleInSync: the Kubernetes PrometheusRule is generated from
// the same rules.
func TestPrometheusRuleInSync(t *testing.T) {
	want, err := build(t, rules.DefaultOptions()).PrometheusRule("mcpaudit")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../deploy/kubernetes/prometheusrule.yaml")
	if err != nil {
		t.Fatalf("%v: run go generate ./rules", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("deploy/kubernetes/prometheusrule.yaml differs from what rules.Build renders: run go generate ./rules (or make generate)")
	}
}

func TestPromtoolCheckRules(t *testing.T) {
	promtool := promtest.Binary(t, "promtool")
	out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

func TestPromtoolTestRules(t *testing.T) {
	promtool := promtest.Binary(t, "promtool")
	out, err := exec.Command(promtool, "test", "rules", testFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestEveryAlertTested checks that the promtool file shows every alert both
// silent and firing.
func TestEveryAlertTested(t *testing.T) {
	b, err := os.ReadFile(testFile)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []struct {
					ExpLabels      map[string]string `yaml:"exp_labels"`
					ExpAnnotations map[string]string `yaml:"exp_annotations"`
				} `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	silent, firing := map[string]bool{}, map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) == 0 {
				silent[a.Alertname] = true
			}
			for _, e := range a.ExpAlerts {
				firing[a.Alertname] = true
				for _, k := range []string{"summary", "description", "runbook_url"} {
					if e.ExpAnnotations[k] == "" {
						t.Errorf("%s: a firing case lacks the %s annotation", a.Alertname, k)
					}
				}
				if e.ExpLabels["severity"] == "" {
					t.Errorf("%s: a firing case lacks the severity label", a.Alertname)
				}
			}
		}
	}
	for _, a := range build(t, rules.DefaultOptions()).Alerts() {
		if !silent[a.Alert] || !firing[a.Alert] {
			t.Errorf("%s: %s needs a case where it is silent and one where it fires (silent %v, firing %v)",
				a.Alert, testFile, silent[a.Alert], firing[a.Alert])
		}
	}
}

var alertName = regexp.MustCompile(`^McpAudit[A-Z][a-zA-Z0-9]*$`)

func TestAlertsComplete(t *testing.T) {
	doc, err := os.ReadFile(runbooks)
	if err != nil {
		t.Fatal(err)
	}
	anchors := headingAnchors(string(doc))
	seen := map[string]bool{}
	for _, a := range build(t, rules.DefaultOptions()).Alerts() {
		if !alertName.MatchString(a.Alert) {
			t.Errorf("%s: not a CamelCase name prefixed McpAudit", a.Alert)
		}
		if seen[a.Alert] {
			t.Errorf("%s: two alerts with one name", a.Alert)
		}
		seen[a.Alert] = true
		if s := a.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
			t.Errorf("%s: severity %q", a.Alert, s)
		}
		sum := a.Annotations["summary"]
		if sum == "" || strings.Contains(sum, "{{") || !strings.HasSuffix(sum, ".") {
			t.Errorf("%s: summary %q must be a fixed sentence", a.Alert, sum)
		}
		if d := a.Annotations["description"]; !strings.Contains(d, "$labels") && !strings.Contains(d, "$value") {
			t.Errorf("%s: description %q uses neither $labels nor $value", a.Alert, d)
		}
		anchor := strings.ToLower(a.Alert)
		if want := rules.DefaultRunbookURL + "#" + anchor; a.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", a.Alert, a.Annotations["runbook_url"], want)
		}
		if !anchors[anchor] {
			t.Errorf("%s: %s has no section with anchor #%s", a.Alert, runbooks, anchor)
		}
	}
	// The alert serve sends per finding (serve.web.notify) is one too: it
	// pages for critical findings (op23 D4: it had no runbook). Its
	// runbook_url is built as the rules' are, and each kind has its step,
	// which the finding's page links.
	if anchor := notify.RunbookAnchor; anchor != strings.ToLower(notify.AlertName) || !alertName.MatchString(notify.AlertName) || !anchors[anchor] {
		t.Errorf("%s: %s has no section with anchor #%s", notify.AlertName, runbooks, anchor)
	}
	for _, k := range audit.Kinds {
		if anchor := strings.TrimPrefix(web.KindRunbook("", k), "#"); !anchors[anchor] {
			t.Errorf("%s of kind %s: %s has no section with anchor #%s", notify.AlertName, k, runbooks, anchor)
		}
	}
}

// headingAnchors returns the anchors GitHub gives the headings of a Markdown
// document: lowercase, punctuation dropped, spaces to hyphens.
func headingAnchors(doc string) map[string]bool {
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	out := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		out[strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")] = true
	}
	return out
}

// TestExprs parses every expression and checks that it reads only metrics the
// exporter defines, recording rules of the same file, or up.
func TestExprs(t *testing.T) {
	f := build(t, rules.DefaultOptions())
	known := map[string]bool{"up": true}
	for _, n := range metrics.SeriesNames() {
		known[n] = true
	}
	for _, fam := range metrics.ProxyFamilies {
		known[fam.Name] = true
	}
	for _, r := range f.Records() {
		known[r.Record] = true
	}
	p := parser.NewParser(parser.Options{})
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			for _, sel := range parser.ExtractSelectors(expr) {
				for _, m := range sel {
					if m.Name == "__name__" && !known[m.Value] {
						t.Errorf("%s reads %s, which nothing defines", name, m.Value)
					}
				}
			}
		}
	}
}

func TestRecords(t *testing.T) {
	f := build(t, rules.DefaultOptions())
	var got []string
	for _, r := range f.Records() {
		got = append(got, r.Record)
	}
	for _, level := range []string{rules.LevelServer, rules.LevelJob} {
		for _, w := range []string{"5m", "30m", "1h", "2h", "6h", "1d", "3d", "30d"} {
			want := level + ":mcpaudit_write_errors:ratio_rate" + w
			if !slices.Contains(got, want) {
				t.Errorf("no recording rule %s", want)
			}
		}
	}
}

func TestOptions(t *testing.T) {
	t.Run("for_override", func(t *testing.T) {
		f := build(t, rules.Options{ForOverride: time.Second})
		for _, a := range f.Alerts() {
			if a.For != "" && a.For != "1s" {
				t.Errorf("%s: for %q, want 1s", a.Alert, a.For)
			}
		}
		for _, a := range build(t, rules.DefaultOptions()).Alerts() {
			if a.Alert == "McpAuditDoubleAppliedWrite" && a.For != "" {
				t.Errorf("%s is immediate, has for %q", a.Alert, a.For)
			}
		}
	})
	t.Run("job_and_target", func(t *testing.T) {
		b, err := rules.Render(rules.Options{Job: "audit", SLOTarget: 0.99})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`up{job="audit"} == 0`, `(14.4 * (1 - 0.99))`, "for the 99% write-durability SLO"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("rules lack %q", want)
			}
		}
	})
	t.Run("invalid", func(t *testing.T) {
		f := func(o rules.Options, want string) {
			t.Helper()
			_, err := rules.Build(o)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Build(%+v) = %v, want an error about %s", o, err, want)
			}
		}
		f(rules.Options{SLOTarget: 1}, "slo_target")
		f(rules.Options{SLOTarget: -0.5}, "slo_target")
		f(rules.Options{Job: `a"b`}, "job")
		f(rules.Options{WastedRetryRatio: -1}, "wasted_retry_ratio")
		f(rules.Options{UncertainRatio: 1}, "uncertain_ratio: 1 is not below 1")
		f(rules.Options{ForOverride: -time.Second}, "for_override")
	})
}

func TestDuration(t *testing.T) {
	f := func(d time.Duration, want string) {
		t.Helper()
		if got := rules.Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
	f(5*time.Minute, "5m")
	f(90*time.Second, "90s")
	f(time.Hour, "1h")
	f(72*time.Hour, "3d")
	f(30*24*time.Hour, "30d")
	f(1500*time.Millisecond, "1500ms")
	f(0, "0s")
}

func TestValidateSLOTarget(t *testing.T) {
	f := func(target float64, wantErr string) {
		t.Helper()
		err := rules.ValidateSLOTarget(target)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("ValidateSLOTarget(%v) = %v, want nil", target, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("ValidateSLOTarget(%v) = %v, want an error saying %q", target, err, wantErr)
		}
	}
	f(0.999, "")
	f(0.99, "")
	f(0.95, "")
	f(0.9999, "")
	f(0.999999, "")
	f(0, "not a fraction between 0 and 1")
	f(1, "not a fraction between 0 and 1")
	f(-0.5, "not a fraction between 0 and 1")
	f(99.9, "not a fraction between 0 and 1")
	f(0.9999999, "below one write in a million")
	f(0.9, "McpAuditWriteErrorBudgetBurnFast needs an error ratio above 14.4")
	f(0.93, "could never fire")
}

// TestRender_TargetExact: a target with many nines is written as given, not
// rounded to 1, so no threshold degenerates to zero.
func TestRender_TargetExact(t *testing.T) {
	o := rules.DefaultOptions()
	o.SLOTarget = 0.99999
	f := build(t, o)
	for _, r := range f.Records() {
		if r.Record == rules.Objective && r.Expr != "vector(0.99999)" {
			t.Errorf("objective %q", r.Expr)
		}
	}
	for _, a := range f.Alerts() {
		if strings.Contains(a.Expr, "(1 - 1)") {
			t.Errorf("%s: degenerate threshold in %s", a.Alert, a.Expr)
		}
		if strings.HasPrefix(a.Alert, "McpAuditWriteErrorBudget") && !strings.Contains(a.Expr, "(1 - 0.99999)") {
			t.Errorf("%s: target not written exactly: %s", a.Alert, a.Expr)
		}
		if d := a.Annotations["description"]; strings.HasPrefix(a.Alert, "McpAuditWriteErrorBudget") && !strings.Contains(d, "99.999%") {
			t.Errorf("%s: description %q lacks 99.999%%", a.Alert, d)
		}
	}
	o.RunbookURL = "https://wiki.example.com/ops/mcpaudit"
	for _, a := range build(t, o).Alerts() {
		if want := o.RunbookURL + "#" + strings.ToLower(a.Alert); a.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", a.Alert, a.Annotations["runbook_url"], want)
		}
	}
	o.RunbookURL = "wiki/runbooks.md#x"
	if _, err := rules.Build(o); err == nil || !strings.Contains(err.Error(), "runbook_url") {
		t.Errorf("a relative runbook URL: error %v", err)
	}
}

// TestRunbookStatesTheTimeRule: the runbook says by which time the finding
// alerts decide, and the metrics doc links to it.
func TestRunbookStatesTheTimeRule(t *testing.T) {
	doc, err := os.ReadFile(runbooks)
	if err != nil {
		t.Fatal(err)
	}
	if !headingAnchors(string(doc))["alerts-are-about-now"] {
		t.Fatalf("%s has no section #alerts-are-about-now", runbooks)
	}
	for _, want := range []string{"ingest time, limited by\n  finding time", "finding_max_age", "mcpaudit_finding_last_event_timestamp_seconds"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("%s does not say %q", runbooks, want)
		}
	}
}

// TestSourceLaggingDescription checks that McpAuditSourceLagging does not
// claim findings wait for the lagging source in general: a source alone in its
// partitions holds nothing back, only its own times are behind.
func TestSourceLaggingDescription(t *testing.T) {
	f := build(t, rules.DefaultOptions())
	for _, a := range f.Alerts() {
		if a.Alert != "McpAuditSourceLagging" {
			continue
		}
		d := a.Annotations["description"]
		if strings.Contains(d, "the findings of its partitions wait for it") {
			t.Errorf("description claims the findings of its partitions always wait: %q", d)
		}
		for _, want := range []string{"other source sharing its partitions", "alone in its partitions holds nothing back"} {
			if !strings.Contains(d, want) {
				t.Errorf("description %q lacks %q", d, want)
			}
		}
		return
	}
	t.Fatal("no McpAuditSourceLagging alert")
}
