package main

import (
	"html"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestCLI_SLOFormula: mcpaudit slo and mcpaudit report, in each of its
// formats but JSON, say how the SLI is computed and from which counts, so
// that the number can be reported with its definition (op23's D10: only
// the /slo page said it; docs/runbooks.md calls the report the reference).
func TestCLI_SLOFormula(t *testing.T) {
	dir := sloStore(t, audit.StateDurable, audit.StateDurable, audit.StateResolved, audit.StateUnverified, audit.StateRejected, audit.StatePending)
	const formula = "SLI = (durable + resolved) / (durable + resolved + unverified + double_applied); rejected and pending writes are outside it."
	code, out, errs := cliRun("slo", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "SLI: 0.75000 (3 / 4)") || !strings.Contains(out, formula) {
		t.Errorf("slo: exit %d, stderr %q; want the SLI with its 3 / 4 and the formula:\n%s", code, errs, out)
	}
	for _, format := range []string{"md", "html"} {
		code, out, errs := cliRun("report", "--data-dir", dir, "--format", format)
		out = html.UnescapeString(out) // html/template writes + as &#43;
		if code != 0 || !strings.Contains(out, formula+" Here: 3 / 4.") {
			t.Errorf("report --format %s: exit %d, stderr %q; want %q and its counts, Here: 3 / 4:\n%s", format, code, errs, formula, out)
		}
	}
}
