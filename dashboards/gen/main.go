// Command gen writes the dashboards to deploy/grafana/dashboards/<uid>.json.
// Run it through `go generate ./dashboards`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mcpaudit/mcpaudit/dashboards"
)

func main() {
	out := flag.String("o", "", "output directory")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "dashboards/gen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if dir == "" {
		return fmt.Errorf("-o is required")
	}
	files, err := dashboards.Render()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cannot create %s: %w", dir, err)
	}
	// Remove dashboards that no longer exist, so the directory is exactly
	// what Render returns.
	old, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	for _, p := range old {
		if _, ok := files[filepath.Base(p)]; !ok {
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("cannot remove %s: %w", p, err)
			}
		}
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return fmt.Errorf("cannot write %s: %w", p, err)
		}
	}
	return nil
}
