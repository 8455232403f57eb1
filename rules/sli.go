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
// Each write counts once, by its latest state, as `mcpaudit report` counts
// the store: a write judged unverified and later proved by a call judged
// late counts as good only (LatestRateExpr).
var (
	// ErrorStates are the write states that spend the error budget.
	ErrorStates = []audit.WriteState{audit.StateUnverified, audit.StateDoubleApplied}
	// GoodStates are the write states the SLI counts as good.
	GoodStates = []audit.WriteState{audit.StateDurable, audit.StateResolved}
	// CountedStates are the write states the SLI counts.
	CountedStates = []audit.WriteState{audit.StateDurable, audit.StateResolved, audit.StateUnverified, audit.StateDoubleApplied}
	// TerminalStates are the states mcpaudit_writes_total counts.
	TerminalStates = []audit.WriteState{audit.StateDurable, audit.StateResolved, audit.StateRejected, audit.StateUnverified, audit.StateDoubleApplied}
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
	return stateSelector(metrics.WritesTotal, metrics.LabelState, states, extra)
}

// RejudgedSelector selects the WritesRejudgedTotal series that left one of
// states, with extra matchers appended as in WritesSelector.
func RejudgedSelector(states []audit.WriteState, extra string) string {
	return stateSelector(metrics.WritesRejudgedTotal, metrics.LabelFrom, states, extra)
}

// stateSelector selects the series of metric whose label is one of states,
// with extra matchers appended.
func stateSelector(metric, label string, states []audit.WriteState, extra string) string {
	op := "=~"
	if len(states) == 1 {
		op = "="
	}
	m := fmt.Sprintf(`%s%s"%s"`, label, op, StateRegex(states))
	if extra != "" {
		m += "," + extra
	}
	return metric + "{" + m + "}"
}

// LatestRateExpr is the rate over window of the writes whose latest state
// is one of states, each write once, summed by the labels in by (none: one
// series): the writes that entered those states (WritesTotal) less those
// that left them for another terminal state (WritesRejudgedTotal), such as
// an unverified write a call judged late proved durable. A process that
// exports no WritesRejudgedTotal series (an older mcpaudit) subtracts
// nothing. In a window holding a write's move but not its first
// judgement the difference is below zero; it is clamped at zero, so a
// window never reads more than all good.
func LatestRateExpr(states []audit.WriteState, by, extraMatchers string, window time.Duration) string {
	agg := "sum"
	if by != "" {
		agg = "sum by (" + by + ")"
	}
	// Increases are subtracted, then divided once: rate() divides each
	// series first, and a difference of rates is rounded where one of
	// increases (whole numbers, where nothing is extrapolated) is not.
	entered := fmt.Sprintf("%s (increase(%s[%s]))", agg, WritesSelector(states, extraMatchers), Duration(window))
	left := fmt.Sprintf("%s (increase(%s[%s]))", agg, RejudgedSelector(states, extraMatchers), Duration(window))
	return fmt.Sprintf("clamp_min(\n  (\n    %s\n    -\n    (%s or 0 * %s)\n  ) / %d,\n  0\n)",
		entered, left, entered, int64(window/time.Second))
}

// LatestByStateExpr is fn (rate or increase) over window of the writes
// whose latest state is one of states, each write once, summed by state and
// the labels in by ("server, tool"; none: by state alone): WritesTotal by
// state less WritesRejudgedTotal by the state a write left (from). Unlike
// LatestRateExpr it is not clamped: the state a write left reads below
// zero in a window holding its move but not its first judgement, where
// the state it entered counts it. window may be a Grafana variable.
func LatestByStateExpr(fn string, states []audit.WriteState, by, extraMatchers, window string) string {
	labels := metrics.LabelState
	if by != "" {
		labels = by + ", " + labels
	}
	entered := fmt.Sprintf("sum by (%s) (%s(%s[%s]))", labels, fn, WritesSelector(states, extraMatchers), window)
	// The state a write left is named state, one label_replace per state:
	// a "$1" reference would read as a Grafana variable.
	moves := make([]string, len(states))
	for i, st := range states {
		moves[i] = fmt.Sprintf(`label_replace(%s(%s[%s]), "%s", "%s", "", "")`,
			fn, RejudgedSelector([]audit.WriteState{st}, extraMatchers), window, metrics.LabelState, st)
	}
	left := fmt.Sprintf("sum by (%s) (\n  %s\n)", labels, strings.Join(moves, "\n  or\n  "))
	return fmt.Sprintf("%s\n-\n(\n%s\nor 0 * %s\n)", entered, left, entered)
}

// ErrorRatioExpr is the write-durability error ratio over window, summed by
// the labels in by (none: one series), from the raw counters, each write
// counted once by its latest state. The rules record its parts;
// queries read the recordings (ErrorRate, CountedRate).
func ErrorRatioExpr(by, extraMatchers string, window time.Duration) string {
	errors := LatestRateExpr(ErrorStates, by, extraMatchers, window)
	return errors + "\n/\n(\n" + CountedRateExpr(by, extraMatchers, window) + "\n)"
}

// CountedRateExpr is the rate over window of the writes the SLI counts,
// each once by its latest state: the good writes and the errors, each
// clamped at zero on its own (LatestRateExpr), then added. Clamping their
// sum alone (LatestRateExpr of CountedStates) let a window that holds a
// durable write's move to double_applied but not its first judgement count
// the error and take the write out of the good ones it never counted
// there: errors above the counted writes, an error ratio above 1, +Inf
// when the window held nothing else (rev20s, review of sli20).
func CountedRateExpr(by, extraMatchers string, window time.Duration) string {
	return LatestRateExpr(GoodStates, by, extraMatchers, window) + "\n+\n" + LatestRateExpr(ErrorStates, by, extraMatchers, window)
}

// ErrorRate names the recording of the rate of writes that spend the error
// budget, per job and server, over window: "server:mcpaudit_write_errors:rate1h".
// A write counts once, by its latest state (LatestRateExpr).
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
			Rule{Record: ErrorRate(w), Expr: LatestRateExpr(ErrorStates, by, "", w)},
			Rule{Record: CountedRate(w), Expr: CountedRateExpr(by, "", w)},
			Rule{Record: ErrorRatio(LevelServer, w), Expr: ErrorRate(w) + "\n/\n" + CountedRate(w)},
			Rule{Record: ErrorRatio(LevelJob, w), Expr: fmt.Sprintf("sum by (job) (%s)\n/\nsum by (job) (%s)", ErrorRate(w), CountedRate(w))},
		)
	}
	return out
}
