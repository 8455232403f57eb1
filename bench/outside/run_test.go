package main

import (
	"os/exec"
	"testing"
)

// TestRunScript_Syntax: bash parses run.sh, which the test suite does not
// run (it takes about 8 minutes and needs Prometheus and Chromium).
func TestRunScript_Syntax(t *testing.T) {
	if out, err := exec.Command("bash", "-n", "run.sh").CombinedOutput(); err != nil {
		t.Fatalf("bash -n run.sh: %v\n%s", err, out)
	}
}
