package main

import (
	"strings"
	"testing"
)

// TestVersionHelp: "mcpaudit version -h" prints the command's usage, as
// every other command's -h does, and an argument it does not take is
// refused (exit 2); before op25 both printed the version and exited 0.
func TestVersionHelp(t *testing.T) {
	for _, h := range []string{"-h", "--help"} {
		code, out, errs := cliRun("version", h)
		if code != 0 || !strings.HasPrefix(out, "usage: mcpaudit version") {
			t.Errorf("version %s: exit %d %q %q, want its usage", h, code, out, errs)
		}
	}
	code, out, errs := cliRun("version", "--short")
	if code != 2 || !strings.Contains(errs, `unexpected argument "--short"`) || out != "" {
		t.Errorf("version --short: exit %d %q %q, want 2 and the argument named", code, out, errs)
	}
	code, out, _ = cliRun("version")
	if code != 0 || !strings.HasPrefix(out, "mcpaudit ") || strings.Contains(out, "usage") {
		t.Errorf("version: exit %d %q", code, out)
	}
}
