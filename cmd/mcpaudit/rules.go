package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/internal/conf"
	"github.com/mcpaudit/mcpaudit/rules"
)

// rulesCommand prints the Prometheus recording and alerting rules for the
// given SLO target, job and runbook URL; with the defaults it prints exactly
// deploy/prometheus/rules.yaml. A config file gives serve.slo_target and the
// rules section; flags win over it.
func rulesCommand(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rules", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d := rules.DefaultOptions()
	target := fs.String("slo-target", strconv.FormatFloat(d.SLOTarget, 'g', -1, 64),
		fmt.Sprintf("write-durability objective, a fraction: above %v and at most %v", 1-1/14.4, rules.MaxSLOTarget))
	job := fs.String("job", d.Job, "Prometheus job name of the mcpaudit scrape target")
	runbook := fs.String("runbook-url", d.RunbookURL, "runbook document the alerts link to; each alert appends #<alert name in lowercase>")
	findingAge := fs.String("finding-max-age", conf.FormatDuration(d.FindingMaxAge),
		"the immediate finding alerts ignore findings whose event time is older than this (keep it above detect.correlation_window + detect.allowed_lateness; a warning says when it is not)")
	unverified := fs.String("unverified-writes-per-hour", number(d.UnverifiedWritesPerHour),
		"McpAuditUnverifiedWrites fires when this many writes of one server (or more) were reported unverified in an hour, withdrawn unverified_write findings not counted: a positive number")
	wasted := fs.String("wasted-retry-ratio", number(d.WastedRetryRatio),
		"McpAuditWastedRetries fires when more than this share of a server's calls over 30m are wasted or premature retries: a fraction in (0, 1) such as 0.05, or a percentage such as 5%")
	uncertain := fs.String("uncertain-ratio", number(d.UncertainRatio),
		"McpAuditUncertainOutcomes fires when more than this share of a server's calls over 10m end with an uncertain outcome of one retry action (replay_same_request or verify_then_decide: COMMIT_UNKNOWN, a write that timed out, E_STORAGE, in_flight_unknown, ...): a fraction in (0, 1) such as 0.01, or a percentage such as 1%")
	webURL := fs.String("web-url", d.WebURL, "base URL of the investigation page (serve's API listener as people reach it), for investigation_url")
	configFile := fs.String("config", "", "YAML config file: serve.slo_target and the rules section, thresholds included (flags win over it)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: mcpaudit rules [--slo-target 0.999] [--job mcpaudit] [--runbook-url URL] [--web-url URL]\n"+
			"                      [--unverified-writes-per-hour 5] [--wasted-retry-ratio 0.05] [--uncertain-ratio 0.01]\n"+
			"                      [--finding-max-age 2h] [--config FILE]\n\n"+
			"Print the Prometheus recording and alerting rules as YAML.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &exitError{code: 2, err: fmt.Errorf("rules: unexpected argument %q", fs.Arg(0))}
	}
	o := d
	// The detector's windows the rules are meant for: the config's, or
	// those a serve without one runs with.
	windows := detect.NewDefaultConfig()
	if *configFile != "" {
		cfg, err := LoadConfig(*configFile)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		windows = cfg.Detect
		r := cfg.Rules
		o.SLOTarget, o.Job, o.RunbookURL = cfg.Serve.SLOTarget, r.Job, r.RunbookURL
		o.UnverifiedWritesPerHour, o.WastedRetryRatio, o.UncertainRatio = r.UnverifiedWritesPerHour, float64(r.WastedRetryRatio), float64(r.UncertainRatio)
		o.FindingMaxAge = r.FindingMaxAge
	}
	var errs []error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "slo-target":
			v, err := strconv.ParseFloat(*target, 64)
			if err != nil {
				errs = append(errs, fmt.Errorf("--slo-target: want a fraction such as 0.999, not %q", *target))
				return
			}
			if err := rules.ValidateSLOTarget(v); err != nil {
				errs = append(errs, fmt.Errorf("--slo-target: %w", err))
				return
			}
			o.SLOTarget = v
		case "job":
			o.Job = *job
		case "runbook-url":
			o.RunbookURL = *runbook
		case "web-url":
			o.WebURL = *webURL
		case "unverified-writes-per-hour":
			v, err := strconv.ParseFloat(*unverified, 64)
			if err != nil || !(v > 0) || math.IsInf(v, 0) {
				errs = append(errs, fmt.Errorf("--unverified-writes-per-hour: want a positive number of writes such as 5, not %q", *unverified))
				return
			}
			o.UnverifiedWritesPerHour = v
		case "wasted-retry-ratio":
			v, err := parseRatio(*wasted)
			if err != nil {
				errs = append(errs, fmt.Errorf("--wasted-retry-ratio: %w", err))
				return
			}
			o.WastedRetryRatio = v
		case "uncertain-ratio":
			v, err := parseRatio(*uncertain)
			if err != nil {
				errs = append(errs, fmt.Errorf("--uncertain-ratio: %w", err))
				return
			}
			o.UncertainRatio = v
		case "finding-max-age":
			v, err := conf.ParseDuration(*findingAge)
			if err != nil || v <= 0 {
				errs = append(errs, fmt.Errorf("--finding-max-age: want a positive duration such as 2h, not %q", *findingAge))
				return
			}
			o.FindingMaxAge = v
		}
	})
	if len(errs) > 0 {
		return &exitError{code: 2, err: fmt.Errorf("rules: %w", errors.Join(errs...))}
	}
	if w := findingMaxAgeWarning(o.FindingMaxAge, windows); w != "" {
		fmt.Fprintln(stderr, "mcpaudit rules: warning:", w)
	}
	b, err := rules.Render(o)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if _, err := stdout.Write(b); err != nil {
		return fmt.Errorf("cannot write rules: %w", err)
	}
	return nil
}

// parseRatio reads an alert's share of calls: a fraction such as 0.05 or a
// percentage such as 5%, strictly between 0 and 1 (a share of 1 or more
// could never be exceeded, so its alert would never fire).
func parseRatio(s string) (float64, error) {
	num, percent := strings.CutSuffix(strings.TrimSpace(s), "%")
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil {
		return 0, fmt.Errorf("want a fraction such as 0.05 or a percentage such as 5%%, not %q", s)
	}
	if percent {
		v /= 100
	}
	if !(v > 0 && v < 1) {
		return 0, fmt.Errorf("%q is not between 0 and 1 (0 %% and 100 %%, both excluded): the share of calls above which the alert fires", s)
	}
	return v, nil
}

// number prints a threshold as the rules file does: the shortest form.
func number(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
