package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/mcpaudit/mcpaudit/rules"
)

// rulesCommand prints the Prometheus recording and alerting rules for the
// given SLO target and job; with the defaults it prints exactly
// deploy/prometheus/rules.yaml.
func rulesCommand(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rules", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d := rules.DefaultOptions()
	o := d
	fs.Float64Var(&o.SLOTarget, "slo-target", d.SLOTarget, "write-durability objective, a fraction in (0, 1)")
	fs.StringVar(&o.Job, "job", d.Job, "Prometheus job name of the mcpaudit scrape target")
	fs.StringVar(&o.WebURL, "web-url", d.WebURL, "base URL of the investigation page (serve's API listener as people reach it), for investigation_url")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: mcpaudit rules [--slo-target 0.999] [--job mcpaudit] [--web-url URL]\n\n"+
			"Print the Prometheus recording and alerting rules as YAML.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &exitError{code: 2} // the flag package has printed the error
	}
	if fs.NArg() > 0 {
		return &exitError{code: 2, err: fmt.Errorf("rules: unexpected argument %q", fs.Arg(0))}
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
