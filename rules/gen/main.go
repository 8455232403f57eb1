// Command gen writes the default rule file, deploy/prometheus/rules.yaml,
// and the same rules as a Prometheus Operator PrometheusRule for
// deploy/kubernetes. Run it through `go generate ./rules`.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/mcpaudit/mcpaudit/rules"
)

func main() {
	out := flag.String("o", "", "output file")
	k8s := flag.String("prometheusrule", "", "also write the rules as a PrometheusRule to this file")
	flag.Parse()
	if err := run(*out, *k8s); err != nil {
		fmt.Fprintln(os.Stderr, "rules/gen:", err)
		os.Exit(1)
	}
}

func run(out, k8s string) error {
	if out == "" {
		return fmt.Errorf("-o is required")
	}
	f, err := rules.Build(rules.DefaultOptions())
	if err != nil {
		return err
	}
	b, err := f.Marshal()
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return fmt.Errorf("cannot write %s: %w", out, err)
	}
	if k8s == "" {
		return nil
	}
	if b, err = f.PrometheusRule("mcpaudit"); err != nil {
		return err
	}
	if err := os.WriteFile(k8s, b, 0o644); err != nil {
		return fmt.Errorf("cannot write %s: %w", k8s, err)
	}
	return nil
}
