package main

import (
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestOutcomeCode (op20's D5): the OUTCOME / CODE of mcpaudit calls and
// WHAT of mcpaudit timeline say a call that saw neither a response nor a
// transport error once and clearly, not "no_response / no_response".
func TestOutcomeCode(t *testing.T) {
	f := func(outcome audit.Outcome, code, want string) {
		t.Helper()
		if got := outcomeCode(outcome, code); got != want {
			t.Errorf("outcomeCode(%s, %q) = %q, want %q", outcome, code, got, want)
		}
	}
	f(audit.OutcomeOK, "", "ok")
	f(audit.OutcomeNoResponse, "timeout", "no_response / timeout")
	f(audit.OutcomeNoResponse, "no_response", "no_response / neither response nor transport error seen")
	f(audit.OutcomeToolError, "COMMIT_UNKNOWN", "tool_error / COMMIT_UNKNOWN")
}
