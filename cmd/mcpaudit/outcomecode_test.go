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

// TestCallsCounted (op20's D5): mcpaudit calls counts one call as "1 call",
// not "1 calls".
func TestCallsCounted(t *testing.T) {
	f := func(n, limit int, more bool, want string) {
		t.Helper()
		if got := callsCounted(n, limit, more); got != want {
			t.Errorf("callsCounted(%d, %d, %v) = %q, want %q", n, limit, more, got, want)
		}
	}
	f(0, 0, false, "0 calls")
	f(1, 0, false, "1 call")
	f(1, 1, true, "1 call (--limit 1; more follow)")
	f(2345, 0, false, "2345 calls")
	f(1500, 1500, true, "1500 calls (--limit 1500; more follow)")
}
