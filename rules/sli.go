package rules

import (
	"fmt"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// The write-durability SLI (findings.md §2) is good / counted, where good
// writes end durable or resolved and counted writes add those that end
// unverified or double-applied. Rejected and pending writes are outside it.
var (
	// ErrorStates are the write states that spend the error budget.
	ErrorStates = []audit.WriteState{audit.StateUnverified, audit.StateDoubleApplied}
	// CountedStates are the write states the SLI counts.
	CountedStates = []audit.WriteState{audit.StateDurable, audit.StateResolved, audit.StateUnverified, audit.StateDoubleApplied}
)

// SLIWindows are the windows of the error-ratio recording rules: the short
// and long windows of the burn-rate alerts, and 30 days for the budget.
var SLIWindows = []time.Duration{
	5 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour,
	24 * time.Hour, 3 * 24 * time.Hour, 30 * 24 * time.Hour,
}

// Aggregation levels of the error-ratio recording rules.
const (
	LevelServer = "server" // one series per server
	LevelJob    = "job"    // every server together
)

// ErrorRatio names the recording rule that holds the write-durability error
// ratio at level over window, e.g. "server:mcpaudit_write_errors:ratio_rate1h".
func ErrorRatio(level string, window time.Duration) string {
	return level + ":mcpaudit_write_errors:ratio_rate" + Duration(window)
}

// StateRegex returns a regular expression matching exactly the given states.
func StateRegex(states []audit.WriteState) string {
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return strings.Join(s, "|")
}

// WritesSelector selects the WritesTotal series in states, with extra
// matchers appended (`server=~"$server"`), or none when extra is empty.
func WritesSelector(states []audit.WriteState, extra string) string {
	op := "=~"
	if len(states) == 1 {
		op = "="
	}
	m := fmt.Sprintf(`%s%s"%s"`, metrics.LabelState, op, StateRegex(states))
	if extra != "" {
		m += "," + extra
	}
	return metrics.WritesTotal + "{" + m + "}"
}

// ErrorRatioExpr is the write-durability error ratio over window, summed by
// the labels in by (none: one series), from the raw counters. The rules
// record it; queries read the recordings (ErrorRate, CountedRate).
func ErrorRatioExpr(by, extraMatchers string, window string) string {
	agg := "sum"
	if by != "" {
		agg = "sum by (" + by + ")"
	}
	return fmt.Sprintf("%s (rate(%s[%s]))\n/\n%s (rate(%s[%s]))",
		agg, WritesSelector(ErrorStates, extraMatchers), window,
		agg, WritesSelector(CountedStates, extraMatchers), window)
}

// ErrorRate names the recording of the rate of writes that spend the error
// budget, per job and server, over window: "server:mcpaudit_write_errors:rate1h".
// Summing it and CountedRate over any set of servers and dividing gives
// that set's error ratio, which a ratio per server cannot.
func ErrorRate(window time.Duration) string {
	return LevelServer + ":mcpaudit_write_errors:rate" + Duration(window)
}

// CountedRate names the recording of the rate of writes the SLI counts, per
// job and server, over window: "server:mcpaudit_writes_counted:rate1h".
func CountedRate(window time.Duration) string {
	return LevelServer + ":mcpaudit_writes_counted:rate" + Duration(window)
}

// Objective names the recording that holds the SLO target the rules were
// built for, so that dashboards read the same target as the alerts.
const Objective = "mcpaudit:write_durability_objective:ratio"

// sliRules records the SLO target, then, at every window, the error and
// counted write rates per job and server and the error ratio per server and
// per job computed from them. A group's rules run in order, so each ratio
// reads the rates of the same evaluation.
func sliRules(target float64) []Rule {
	out := []Rule{{Record: Objective, Expr: fmt.Sprintf("vector(%s)", number(target))}}
	by := "job, " + metrics.LabelServer
	for _, w := range SLIWindows {
		out = append(out,
			Rule{Record: ErrorRate(w), Expr: fmt.Sprintf("sum by (%s) (rate(%s[%s]))", by, WritesSelector(ErrorStates, ""), Duration(w))},
			Rule{Record: CountedRate(w), Expr: fmt.Sprintf("sum by (%s) (rate(%s[%s]))", by, WritesSelector(CountedStates, ""), Duration(w))},
			Rule{Record: ErrorRatio(LevelServer, w), Expr: ErrorRate(w) + "\n/\n" + CountedRate(w)},
			Rule{Record: ErrorRatio(LevelJob, w), Expr: fmt.Sprintf("sum by (job) (%s)\n/\nsum by (job) (%s)", ErrorRate(w), CountedRate(w))},
		)
	}
	return out
}
