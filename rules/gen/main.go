// Command gen writes the default rule file, deploy/prometheus/rules.yaml.
// Run it through `go generate ./rules`.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/mcpaudit/mcpaudit/rules"
)

func main() {
	out := flag.String("o", "", "output file")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "rules/gen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	if out == "" {
		return fmt.Errorf("-o is required")
	}
	b, err := rules.Render(rules.DefaultOptions())
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return fmt.Errorf("cannot write %s: %w", out, err)
	}
	return nil
}
