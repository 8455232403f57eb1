package rules

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/conf"
)

// DefaultSLOTarget is the default write-durability objective: 99.9% of the
// writes that count toward the SLI end durable or resolved.
const DefaultSLOTarget = 0.999

// DefaultJob is the default Prometheus job name of the mcpaudit scrape target.
const DefaultJob = "mcpaudit"

// DefaultRunbookURL is where the runbook_url annotations point; each alert
// appends "#" and its name in lowercase.
const DefaultRunbookURL = "https://github.com/mcpaudit/mcpaudit/blob/main/docs/runbooks.md"

// DefaultWebURL is where the investigation_url annotations point by
// default: the page of mcpaudit serve on its default API listener.
const DefaultWebURL = "http://localhost:9464"

// Options configures the rules. Build fills zero fields with the defaults of
// DefaultOptions.
type Options struct {
	// SLOTarget is the write-durability objective as a fraction, in (0, 1).
	// Default 0.999.
	SLOTarget float64
	// Job is the Prometheus job that scrapes mcpaudit, for the collector
	// alerts. Default "mcpaudit".
	Job string
	// RunbookURL is the runbook document; alerts link to its sections.
	// Default DefaultRunbookURL.
	RunbookURL string
	// WebURL is the base URL of the investigation page (mcpaudit serve's
	// API listener as people reach it); alerts about findings, writes and
	// the SLO link to the view that shows their evidence in the
	// investigation_url annotation. Default DefaultWebURL.
	WebURL string
	// UnverifiedWritesPerHour is how many writes of one server may be
	// reported unverified in an hour (unverified_write findings, less those
	// withdrawn) before McpAuditUnverifiedWrites. Default 5.
	UnverifiedWritesPerHour float64
	// WastedRetryRatio is the fraction of a server's calls that may be wasted
	// or premature retries before McpAuditWastedRetries. Default 0.05.
	WastedRetryRatio float64
	// UncertainRatio is the fraction of a server's calls that may end with an
	// uncertain outcome of one retry action (replay_same_request or
	// verify_then_decide: COMMIT_UNKNOWN, a write's timeout, E_STORAGE,
	// in_flight_unknown, ...) before McpAuditUncertainOutcomes.
	// Default 0.01.
	UncertainRatio float64
	// IngestRejectRatio is the fraction of one source's records that may be
	// rejected for one reason before McpAuditIngestRejections. Default 0.01.
	IngestRejectRatio float64
	// SourceLag is how far behind the wall clock the most lagging active
	// source of a server may run before McpAuditSourceLagging: its
	// partitions' findings wait that long. Default 5m.
	SourceLag time.Duration
	// FindingMaxAge is how old, in event time against the wall clock, the
	// newest finding of a kind may be for its immediate alert to fire: a
	// finding about the past (an old capture loaded into the collector) does
	// not page. Keep it above detect.correlation_window plus
	// detect.allowed_lateness, the longest a finding's evidence can take
	// to complete (more when sources lag). Default 2h.
	FindingMaxAge time.Duration
	// ForOverride, when positive, replaces every non-zero for: duration. It
	// exists for end-to-end tests against a real Prometheus. Default 0 (off).
	ForOverride time.Duration
}

// DefaultOptions returns the options of the committed rules file.
func DefaultOptions() Options {
	return Options{
		SLOTarget:               DefaultSLOTarget,
		Job:                     DefaultJob,
		RunbookURL:              DefaultRunbookURL,
		WebURL:                  DefaultWebURL,
		UnverifiedWritesPerHour: 5,
		WastedRetryRatio:        0.05,
		UncertainRatio:          0.01,
		IngestRejectRatio:       0.01,
		SourceLag:               5 * time.Minute,
		FindingMaxAge:           2 * time.Hour,
	}
}

// withDefaults fills the zero fields of o from DefaultOptions.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.SLOTarget == 0 {
		o.SLOTarget = d.SLOTarget
	}
	if o.Job == "" {
		o.Job = d.Job
	}
	if o.RunbookURL == "" {
		o.RunbookURL = d.RunbookURL
	}
	if o.WebURL == "" {
		o.WebURL = d.WebURL
	}
	if o.UnverifiedWritesPerHour == 0 {
		o.UnverifiedWritesPerHour = d.UnverifiedWritesPerHour
	}
	if o.WastedRetryRatio == 0 {
		o.WastedRetryRatio = d.WastedRetryRatio
	}
	if o.UncertainRatio == 0 {
		o.UncertainRatio = d.UncertainRatio
	}
	if o.IngestRejectRatio == 0 {
		o.IngestRejectRatio = d.IngestRejectRatio
	}
	if o.FindingMaxAge == 0 {
		o.FindingMaxAge = d.FindingMaxAge
	}
	if o.SourceLag == 0 {
		o.SourceLag = d.SourceLag
	}
	return o
}

// MaxSLOTarget is the highest SLO target the rules accept: above it the
// error budget is below one write in a million, and the fast-burn threshold
// (14.4 times the budget over 5 minutes) pages on any single failed write of
// all but the busiest servers: the alert no longer measures a burn rate.
const MaxSLOTarget = 0.999999

// ValidateSLOTarget says why target cannot be a write-durability objective:
// it must be a fraction below MaxSLOTarget, and high enough that every
// burn-rate threshold is below an error ratio of 1, or that alert could
// never fire.
func ValidateSLOTarget(target float64) error {
	if math.IsNaN(target) || !(target > 0 && target < 1) {
		return fmt.Errorf("%v is not a fraction between 0 and 1 (0.999 is 99.9%%)", target)
	}
	if target > MaxSLOTarget {
		return fmt.Errorf("%v leaves an error budget of %.3g, below one write in a million: the burn-rate thresholds "+
			"(%s times the budget) would page on any single failed write; use at most %v", target, 1-target, number(burns[0].factor), MaxSLOTarget)
	}
	for _, br := range burns {
		if br.factor*(1-target) >= 1 {
			return fmt.Errorf("%v is too low: %s needs an error ratio above %s × %.3g = %.3g, more than every write, "+
				"so it could never fire; use a target above %.6g", target, br.name, number(br.factor), 1-target,
				br.factor*(1-target), 1-1/br.factor)
		}
	}
	return nil
}

// Validate reports every invalid option, each with its name.
func (o Options) Validate() error {
	var errs []error
	if err := ValidateSLOTarget(o.SLOTarget); err != nil {
		errs = append(errs, fmt.Errorf("slo_target: %w", err))
	}
	if fault := conf.URLFault(o.RunbookURL, false); fault != "" {
		errs = append(errs, fmt.Errorf("runbook_url: want an absolute URL without a #fragment: %s (the value is not repeated: it may hold a secret)", fault))
	}
	if o.Job == "" || strings.ContainsAny(o.Job, "\"\\\n") {
		errs = append(errs, fmt.Errorf("job: %q is empty or holds a quote, backslash or newline", o.Job))
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"unverified_writes_per_hour", o.UnverifiedWritesPerHour},
		{"wasted_retry_ratio", o.WastedRetryRatio},
		{"uncertain_ratio", o.UncertainRatio},
		{"ingest_reject_ratio", o.IngestRejectRatio},
	} {
		if !(f.v > 0) {
			errs = append(errs, fmt.Errorf("%s: %v is not positive", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"wasted_retry_ratio", o.WastedRetryRatio}, {"uncertain_ratio", o.UncertainRatio}, {"ingest_reject_ratio", o.IngestRejectRatio}} {
		if f.v >= 1 {
			errs = append(errs, fmt.Errorf("%s: %v is not below 1: no share of calls exceeds it, so its alert would never fire", f.name, f.v))
		}
	}
	if o.FindingMaxAge < 0 {
		errs = append(errs, fmt.Errorf("finding_max_age: %v is negative", o.FindingMaxAge))
	}
	if o.SourceLag < 0 {
		errs = append(errs, fmt.Errorf("source_lag: %v is negative", o.SourceLag))
	}
	if o.WebURL != "" {
		// As serve.web.base_url: a URL someone mistyped may hold a
		// credential (https://user:pass@...), and errors are read by more
		// people than the command line.
		if fault := conf.URLFault(o.WebURL, true, "http", "https"); fault != "" {
			errs = append(errs, fmt.Errorf("web_url: want an http or https URL, such as https://mcpaudit.example.com: %s (the value is not repeated: it may hold a secret)", fault))
		}
	}
	if o.ForOverride < 0 {
		errs = append(errs, fmt.Errorf("for_override: %v is negative", o.ForOverride))
	}
	return errors.Join(errs...)
}

// File is a Prometheus rule file.
type File struct {
	Groups []Group `yaml:"groups"`
}

// Group is a rule group; its rules are evaluated in order at the global
// evaluation interval.
type Group struct {
	Name  string `yaml:"name"`
	Rules []Rule `yaml:"rules"`
}

// Rule is a recording rule (Record set) or an alerting rule (Alert set).
type Rule struct {
	Record      string            `yaml:"record,omitempty"`
	Alert       string            `yaml:"alert,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// Alerts returns the alerting rules of f in file order.
func (f *File) Alerts() []Rule {
	var out []Rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// Records returns the recording rules of f in file order.
func (f *File) Records() []Rule {
	var out []Rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// header starts every rendered rule file.
const header = "# Generated by `go generate ./rules` from rules/*.go (or `mcpaudit rules`). DO NOT EDIT.\n"

// Marshal renders f as YAML.
func (f *File) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(header)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("cannot encode rules: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("cannot encode rules: %w", err)
	}
	return buf.Bytes(), nil
}

// PrometheusRule renders f as a Prometheus Operator PrometheusRule named
// name: the same groups as Marshal, under spec.
func (f *File) PrometheusRule(name string) ([]byte, error) {
	type metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	}
	doc := struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Metadata   metadata `yaml:"metadata"`
		Spec       *File    `yaml:"spec"`
	}{"monitoring.coreos.com/v1", "PrometheusRule", metadata{name, map[string]string{"app.kubernetes.io/name": name}}, f}
	var buf bytes.Buffer
	buf.WriteString(strings.Replace(header, "DO NOT EDIT.", "The groups are deploy/prometheus/rules.yaml's. DO NOT EDIT.", 1))
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("cannot encode rules: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("cannot encode rules: %w", err)
	}
	return buf.Bytes(), nil
}

// Render builds the rules for o and renders them as YAML.
func Render(o Options) ([]byte, error) {
	f, err := Build(o)
	if err != nil {
		return nil, err
	}
	return f.Marshal()
}

// Build returns the recording and alerting rules for o; zero fields of o take
// their defaults.
func Build(o Options) (*File, error) {
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("cannot build rules: %w", err)
	}
	b := &builder{o: o}
	return &File{Groups: []Group{
		{Name: "mcpaudit-write-durability-sli", Rules: sliRules(o.SLOTarget)},
		{Name: "mcpaudit-write-durability-slo", Rules: b.sloAlerts()},
		{Name: "mcpaudit-findings", Rules: b.findingAlerts()},
		{Name: "mcpaudit-writes", Rules: b.writeAlerts()},
		{Name: "mcpaudit-clients", Rules: b.clientAlerts()},
		{Name: "mcpaudit-collector", Rules: b.collectorAlerts()},
		{Name: "mcpaudit-store", Rules: b.storeAlerts()},
		{Name: "mcpaudit-relays", Rules: b.relayAlerts()},
	}}, nil
}

// builder renders alerts with the options applied.
type builder struct{ o Options }

// alert is the part of an alerting rule that differs between alerts.
type alert struct {
	name        string
	expr        string
	for_        time.Duration
	severity    string
	summary     string
	description string
	// view is the path and query of the page view that shows the alert's
	// evidence; empty for alerts about the collector itself.
	view string
}

func (b *builder) rule(a alert) Rule {
	d := a.for_
	if d > 0 && b.o.ForOverride > 0 {
		d = b.o.ForOverride
	}
	r := Rule{
		Alert:  a.name,
		Expr:   a.expr,
		Labels: map[string]string{"severity": a.severity},
		Annotations: map[string]string{
			"summary":     a.summary,
			"description": a.description,
			"runbook_url": b.o.RunbookURL + "#" + strings.ToLower(a.name),
		},
	}
	if a.view != "" {
		r.Annotations["investigation_url"] = strings.TrimRight(b.o.WebURL, "/") + a.view
	}
	if d > 0 {
		r.For = Duration(d)
	}
	return r
}

// serverParam is the server label as a query parameter of a view.
const serverParam = "server={{ $labels.server | urlquery }}"

// findingsView is the page's findings of one kind on the alert's server.
func findingsView(kind audit.Kind) string {
	return "/?kind=" + string(kind) + "&" + serverParam
}

// callsView is the page's list of the alert's server's calls that failed
// with the alert's retry action over the last window (/calls/). An alert's
// annotations have no time of their own: the window counts back from
// when the link is opened.
func callsView(window time.Duration) string {
	return "/calls/?" + serverParam + "&retry_action={{ $labels.retry_action | urlquery }}&since=" + Duration(window)
}

// sloView is the page's SLO view of the alert's server.
const sloView = "/slo?" + serverParam

// Duration renders d as a Prometheus duration: the largest unit of d, h, m,
// s and ms that divides it ("1h", "90s", "3d").
func Duration(d time.Duration) string {
	units := []struct {
		suffix string
		unit   time.Duration
	}{{"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}, {"ms", time.Millisecond}}
	for _, u := range units {
		if d >= u.unit && d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.suffix
		}
	}
	return "0s"
}

// percent renders a fraction as a percentage for annotations: 0.999 → "99.9%".
func percent(f float64) string {
	return strconv.FormatFloat(f*100, 'g', 10, 64) + "%"
}

// number renders a float for PromQL: exactly (0.9999999 stays 0.9999999),
// without exponent noise for the values rules use.
func number(f float64) string {
	return strconv.FormatFloat(f, 'g', -1, 64)
}
