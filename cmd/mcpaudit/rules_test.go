package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/rules/promtest"
)

// TestRulesThresholds: mcpaudit rules sets the three alert thresholds the
// runbooks give "by default"; the file it writes passes promtool, the
// defaults still print the committed rules file, and bad values are
// refused with the flag and the reason.
func TestRulesThresholds(t *testing.T) {
	code, out, errs := cliRun("rules", "--unverified-writes-per-hour", "12", "--wasted-retry-ratio", "10%", "--uncertain-ratio", "0.02")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"increase(mcpaudit_writes_total{state=\"unverified\"}[1h])) >= 12\n",
		"> 0.1\n",
		"> 0.02\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rules lack %q", want)
		}
	}
	for _, def := range []string{">= 5\n", "> 0.05\n"} {
		if strings.Contains(out, def) {
			t.Errorf("rules still hold the default %q", def)
		}
	}
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool := promtest.Binary(t, "promtool")
	if b, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, b)
	}

	// The defaults, given as flags, print the committed file.
	committed, err := os.ReadFile("../../deploy/prometheus/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, out, _ := cliRun("rules", "--unverified-writes-per-hour", "5", "--wasted-retry-ratio", "5%", "--uncertain-ratio", "0.01"); out != string(committed) {
		t.Error("the default thresholds given as flags do not print deploy/prometheus/rules.yaml")
	}

	for _, tc := range []struct{ flag, value, want string }{
		{"--unverified-writes-per-hour", "0", "--unverified-writes-per-hour: want a positive number of writes"},
		{"--unverified-writes-per-hour", "five", "--unverified-writes-per-hour: want a positive number of writes"},
		{"--wasted-retry-ratio", "1", `--wasted-retry-ratio: "1" is not between 0 and 1`},
		{"--wasted-retry-ratio", "150%", `--wasted-retry-ratio: "150%" is not between 0 and 1`},
		{"--uncertain-ratio", "-0.01", `--uncertain-ratio: "-0.01" is not between 0 and 1`},
		{"--uncertain-ratio", "lots", "--uncertain-ratio: want a fraction such as 0.05 or a percentage such as 5%"},
	} {
		code, out, errs := cliRun("rules", tc.flag, tc.value)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("rules %s %s: exit %d, stdout %d bytes, stderr %q; want 2 and %q", tc.flag, tc.value, code, len(out), errs, tc.want)
		}
	}
}
