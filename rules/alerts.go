package rules

import (
	"fmt"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// Severities of alerts: critical pages a person now, warning goes to the work
// queue.
const (
	SeverityCritical = "critical"
	SeverityWarning  = "warning"
)

// burn is one multi-window burn-rate alert of the SRE workbook: the error
// ratio over both windows exceeds factor times the budget (1 - target).
type burn struct {
	name        string
	factor      float64
	long, short time.Duration
	for_        time.Duration
	severity    string
	summary     string
	exhausts    string // how soon the 30-day budget is gone at a burn rate of factor
}

// burns: 2% of the budget in 1h, 5% in 6h (pages), 10% in 3d (ticket).
var burns = []burn{
	{"McpAuditWriteErrorBudgetBurnFast", 14.4, time.Hour, 5 * time.Minute, 2 * time.Minute, SeverityCritical,
		"Write durability is burning its error budget fast.", "about 2 days"},
	{"McpAuditWriteErrorBudgetBurnMedium", 6, 6 * time.Hour, 30 * time.Minute, 15 * time.Minute, SeverityCritical,
		"Write durability is burning its error budget steadily.", "5 days"},
	{"McpAuditWriteErrorBudgetBurnSlow", 1, 3 * 24 * time.Hour, 6 * time.Hour, time.Hour, SeverityWarning,
		"Write durability is using up its error budget.", "30 days"},
}

func (b *builder) sloAlerts() []Rule {
	budget := "(1 - " + number(b.o.SLOTarget) + ")"
	var out []Rule
	for _, br := range burns {
		threshold := fmt.Sprintf("(%s * %s)", number(br.factor), budget)
		out = append(out, b.rule(alert{
			name: br.name,
			expr: fmt.Sprintf("%s > %s\nand\n%s > %s",
				ErrorRatio(LevelServer, br.long), threshold, ErrorRatio(LevelServer, br.short), threshold),
			for_:     br.for_,
			severity: br.severity,
			summary:  br.summary,
			description: fmt.Sprintf("{{ $value | humanizePercentage }} of the writes to server {{ $labels.server }} "+
				"over the last %s (and over the last %s) ended unverified or double-applied, a burn rate above %s "+
				"for the %s write-durability SLO (at %s the 30-day error budget is gone in %s, sooner above it).",
				Duration(br.long), Duration(br.short), number(br.factor), percent(b.o.SLOTarget), number(br.factor), br.exhausts),
			view: sloView,
		}))
	}
	return out
}

// eventWindow is how long an immediate alert stays firing after its event.
const eventWindow = 10 * time.Minute

// eventCount prints $value, a count of events over a window that
// increase() estimated, as a whole number. increase() extrapolates to the
// window's edges: 3 collisions whose first sample falls inside the window
// read "3.214 call(s)" through humanize.
const eventCount = `{{ printf "%.0f" $value }}`

// byServer groups the per-server alerts: by job and server, so that they
// carry the job label as the collector's and the SLO's alerts do (both
// bounded: a job per scrape config, a server per audited MCP server).
const byServer = "job, " + metrics.LabelServer

// newFindings counts the findings of kind per job and server over window.
// increase() cannot see the first increment of a series that is born
// non-zero (a finding of a server the exporter had not seen before the
// scrape, or any counter when Prometheus starts): such a series, absent one
// window ago, counts with its whole value instead.
func newFindings(kind audit.Kind, window time.Duration) string {
	sel := fmt.Sprintf(`%s{%s="%s"}`, metrics.FindingsTotal, metrics.LabelKind, kind)
	return newEvents(sel, byServer, window)
}

// newEvents sums the increase of the counter series sel by the labels by
// over window, counting a series absent one window ago with the largest
// value it had in the window (see newFindings). The largest, not the
// last: a collector restarted within the window starts the series again
// at 0 (the findings counters only from a state file without their saved
// values since alrt48: docs/metrics.md, "Counters across
// restarts"; the store faults at every start), and its events before the
// restart must still count until the window has passed them (with the
// last value, an alert born that way went silent at the restart: found by
// the incident walkthrough, docs/incident.md).
func newEvents(sel, by string, window time.Duration) string {
	w := Duration(window)
	return fmt.Sprintf("sum by (%s) (\n  (max_over_time(%s[%s]) unless %s offset %s)\n  or\n  increase(%s[%s])\n)",
		by, sel, w, sel, w, sel, w)
}

// recent keeps the servers whose newest finding of kind has an event time
// within the last maxAge of the wall clock: the finding alerts are about now,
// not about findings of the past that reach the collector now. The gauge is
// read over the alert's window, as newEvents reads the counter: after a
// restart it had no series until the server's next finding of the kind
// (serve seeds it from the store since op22; a store that cannot tell
// still leaves it empty), and the alert then resolved at the restart, minutes before its window
// had passed the finding (found from outside with a real Prometheus,
// docs/detection.md).
func recent(kind audit.Kind, maxAge, window time.Duration) string {
	return fmt.Sprintf("and on (%s)\n(time() - max by (%s) (max_over_time(%s{%s=\"%s\"}[%s])) < %s)",
		byServer, byServer, metrics.FindingLastEventTimestampSeconds, metrics.LabelKind, kind,
		Duration(window), number(maxAge.Seconds()))
}

func (b *builder) findingAlerts() []Rule {
	immediate := []struct {
		name    string
		kind    audit.Kind
		summary string
		what    string
	}{
		{"McpAuditDoubleAppliedWrite", audit.KindDoubleAppliedWrite,
			"A write was applied twice to one document.",
			"double-applied write(s) in the last %s: the same edit landed twice on one document, not through an idempotent replay"},
		{"McpAuditDuplicateCreate", audit.KindDuplicateCreate,
			"One intended document was created twice.",
			"duplicate create(s) in the last %s: one intended document was created twice under different or missing creationIds"},
		{"McpAuditIntegrityFailure", audit.KindIntegrityFailure,
			"A server reported corruption.",
			"integrity failure(s) in the last %s: the server reported E_INTEGRITY or a corrupt journal"},
	}
	var out []Rule
	for _, a := range immediate {
		out = append(out, b.rule(alert{
			name:     a.name,
			expr:     newFindings(a.kind, eventWindow) + " > 0\n" + recent(a.kind, b.o.FindingMaxAge, eventWindow),
			severity: SeverityCritical,
			summary:  a.summary,
			description: "Server {{ $labels.server }} produced " + eventCount + " " +
				fmt.Sprintf(a.what, Duration(eventWindow)) + ".",
			view: findingsView(a.kind),
		}))
	}
	return out
}

// UnverifiedStanding counts, per job and server over window, the
// unverified_write findings that stand: those made less those withdrawn.
// Not mcpaudit_writes_total{state="unverified"}: a write that a call judged
// late proved applied counts there and again as resolved, though its
// finding was withdrawn (live19: 16,295 unverified writes against 14,307
// findings that stood, the 1,988 withdrawn), and a replay of a write
// already reported unverified has no finding of its own. The withdrawn
// series exists at 0 beside each findings series, so both sides match.
func UnverifiedStanding(extraMatchers string, window time.Duration) string {
	sel := func(name string) string {
		m := fmt.Sprintf(`%s="%s"`, metrics.LabelKind, audit.KindUnverifiedWrite)
		if extraMatchers != "" {
			m += "," + extraMatchers
		}
		return name + "{" + m + "}"
	}
	return fmt.Sprintf("(\n%s\n-\n%s\n)", newEvents(sel(metrics.FindingsTotal), byServer, window),
		newEvents(sel(metrics.FindingsWithdrawnTotal), byServer, window))
}

func (b *builder) writeAlerts() []Rule {
	pending := metrics.WritesPending
	return []Rule{
		b.rule(alert{
			name:     "McpAuditUnverifiedWrites",
			expr:     fmt.Sprintf("%s >= %s", UnverifiedStanding("", time.Hour), number(b.o.UnverifiedWritesPerHour)),
			for_:     15 * time.Minute,
			severity: SeverityWarning,
			summary:  "Writes are ending unverified.",
			description: eventCount + " write(s) to server {{ $labels.server }} were reported unverified in the last hour " +
				"(unverified_write findings, less those withdrawn): their verification window passed with no proof " +
				"that they were applied and no client check.",
			view: findingsView(audit.KindUnverifiedWrite),
		}),
		b.rule(alert{
			name: "McpAuditWritesPendingNotDraining",
			// A decrease of the gauge (a reset, to resets()) means some write
			// left pending. None in 15 minutes, three default verification
			// windows, means the verification clock is stuck.
			expr: fmt.Sprintf("(max by (%s) (%s) > 0)\nunless on (%s)\n(max by (%s) (resets(%s[15m])) > 0)",
				byServer, pending, byServer, byServer, pending),
			for_:     15 * time.Minute,
			severity: SeverityWarning,
			summary:  "Pending writes are not draining.",
			description: "Server {{ $labels.server }} has had {{ $value | humanize }} pending write(s) and not one has left " +
				"pending for 15 minutes: verification windows are not closing.",
			view: sloView,
		}),
	}
}

func (b *builder) clientAlerts() []Rule {
	calls := metrics.ToolCallsTotal
	server := byServer
	wasted := fmt.Sprintf(`%s{%s=~"%s|%s"}`, metrics.FindingsTotal, metrics.LabelKind,
		audit.KindWastedRetry, audit.KindPrematureRetry)
	// Uncertain outcomes are the failures of the two retry actions whose
	// outcome is unknown (findings.md §1): COMMIT_UNKNOWN, E_STORAGE,
	// E_TIMEOUT, -32603, in_flight_unknown, and a write that timed out or got
	// no response, whatever its code. A read that timed out is
	// wait_then_retry: nothing was written.
	uncertain := fmt.Sprintf(`%s{%s=~"%s|%s"}`, metrics.CallFailuresTotal, metrics.LabelRetryAction,
		audit.ActionReplaySameRequest, audit.ActionVerifyThenDecide)
	return []Rule{
		b.rule(alert{
			name:     "McpAuditUnsafeRetries",
			expr:     newFindings(audit.KindUnsafeRetry, time.Hour) + " > 0\n" + recent(audit.KindUnsafeRetry, b.o.FindingMaxAge, time.Hour),
			for_:     5 * time.Minute,
			severity: SeverityWarning,
			summary:  "Clients re-send uncertain writes without the safe step.",
			description: "Server {{ $labels.server }} saw " + eventCount + " unsafe retry finding(s) in the last hour: after an " +
				"uncertain write a client sent the same intent under a new key, or a non-idempotent write to the same " +
				"target, without reading the target first.",
			view: findingsView(audit.KindUnsafeRetry),
		}),
		b.rule(alert{
			name: "McpAuditWastedRetries",
			expr: fmt.Sprintf("sum by (%s) (increase(%s[30m]))\n/\nsum by (%s) (increase(%s[30m]))\n> %s",
				server, wasted, server, calls, number(b.o.WastedRetryRatio)),
			for_:     30 * time.Minute,
			severity: SeverityWarning,
			summary:  "Clients retry calls that cannot succeed.",
			// The findings and the calls are counted apart: a finding
			// about a call counted before the window, of a server whose
			// calls stopped, counts with no call. Over no call the ratio
			// is +Inf (and read "+Inf%"), over fewer calls than findings
			// above 1: the description says so instead. Both counters go
			// on across restarts, and a restart's replay counts neither
			// again (docs/metrics.md, "Counters across restarts"): before
			// rcn49 the replay counted the calls of its last 2m01s again
			// and read the ratio low (out48).
			description: "{{ if le $value 1.0 }}{{ $value | humanizePercentage }} of the calls to server {{ $labels.server }} " +
				"in the last 30m were wasted or premature retries{{ else }}More wasted or premature retries than calls were " +
				"counted for server {{ $labels.server }} in the last 30m (findings about calls counted before then){{ end }}: identical requests re-sent after a fix_input or reauthorize error, or " +
				"before the receipt's retryAfter.",
			view: findingsView(audit.KindWastedRetry),
		}),
		b.rule(alert{
			name: "McpAuditUncertainOutcomes",
			expr: fmt.Sprintf("sum by (%s, %s) (rate(%s[10m]))\n/ on (%s) group_left\nsum by (%s) (rate(%s[10m]))\n> %s",
				server, metrics.LabelRetryAction, uncertain, server, server, calls, number(b.o.UncertainRatio)),
			for_:     10 * time.Minute,
			severity: SeverityWarning,
			summary:  "Many calls end with an unknown outcome.",
			// The codes and the client's step are those of the alert's own
			// retry_action, as the runbook gives them: before op25 both
			// classes' codes and both steps were listed for either, so an
			// alert about replay_same_request named E_STORAGE and
			// in_flight_unknown, and left the step to the reader.
			description: "{{ $value | humanizePercentage }} of the calls to server {{ $labels.server }} over the last 10m " +
				"ended with an uncertain outcome ({{ $labels.retry_action }}): " +
				"{{ if eq $labels.retry_action \"" + string(audit.ActionReplaySameRequest) + "\" }}" +
				"COMMIT_UNKNOWN, a gram_patch that timed out or got no response, a keyed createDocument that timed out. " +
				"Nobody knows whether those writes were applied; a key protects each: the client must resend it " +
				"identical under the same key." +
				"{{ else }}" +
				"E_STORAGE, E_TIMEOUT, -32603, in_flight_unknown, an unkeyed or oddlynew write that timed out or got no " +
				"response. Nobody knows whether those writes were applied and no key makes a blind retry safe: the client " +
				"must read the target before deciding." +
				"{{ end }}",
			// The calls of its retry action over its 10m rate and its 10m
			// for: (before op46 the unverified_write findings, which a
			// correct client's replay never makes).
			view: callsView(20 * time.Minute),
		}),
	}
}

func (b *builder) collectorAlerts() []Rule {
	up := fmt.Sprintf(`up{job="%s"}`, b.o.Job)
	return []Rule{
		b.rule(alert{
			name: "McpAuditIngestRejections",
			// The denominator is every MCP record received: the results are
			// disjoint, and ignored records (spans of other operations) would
			// dilute the ratio of a source that forwards all its traces.
			expr: fmt.Sprintf("sum by (job, %s, %s) (rate(%s[10m]))\n/ on (job, %s) group_left\nsum by (job, %s) (rate(%s{%s!=\"%s\"}[10m]))\n> %s",
				metrics.LabelSource, metrics.LabelReason, metrics.IngestRejectedTotal, metrics.LabelSource,
				metrics.LabelSource, metrics.IngestRecordsTotal, metrics.LabelResult, metrics.ResultIgnored, number(b.o.IngestRejectRatio)),
			for_:     10 * time.Minute,
			severity: SeverityWarning,
			summary:  "The collector rejects incoming records.",
			description: "{{ $value | humanizePercentage }} of the MCP records received over {{ $labels.source }} in the last " +
				"10m were rejected as {{ $labels.reason }}: those calls are not audited, unless refused for load " +
				"(overloaded, queue_full, tenant_share, store_unavailable, canceled, timeout) and retried by their senders until taken.",
		}),
		b.rule(alert{
			name: "McpAuditSourceLagging",
			expr: fmt.Sprintf("max by (%s, %s) (%s{%s=\"%s\"}) > %s", "job", metrics.LabelServer, metrics.PipelineSourceLagSeconds,
				metrics.LabelState, metrics.SourceActive, number(b.o.SourceLag.Seconds())),
			for_:     10 * time.Minute,
			severity: SeverityWarning,
			summary:  "An exporter or poster of MCP calls is far behind the wall clock.",
			description: "The most lagging active source feeding {{ $labels.server }} has delivered calls only up to " +
				"{{ $value | humanizeDuration }} ago: the event times of its calls are that far behind, and the findings of any " +
				"other source sharing its partitions wait for it (a source alone in its partitions holds nothing back). " +
				"mcpaudit status (or /api/v1/status) names the source and the partitions it holds back (HELD BY).",
		}),
		b.rule(alert{
			name: "McpAuditCallsNotJudged",
			// Any: each such call is stored and never judged, so the findings
			// it takes part in may be missing. A series born non-zero (the
			// first too-late call of a server after a start) counts whole.
			expr: newEvents(fmt.Sprintf(`%s{%s="%s"}`, metrics.PipelineLateCallsTotal, metrics.LabelResult, metrics.LateTooLate),
				"job, "+metrics.LabelServer, eventWindow) + " > 0",
			severity: SeverityWarning,
			summary:  "Calls came too late to be judged: findings may be missing.",
			description: eventCount + " call(s) to server {{ $labels.server }} in the last 10m came later than " +
				"detect.allowed_lateness behind its watermark (a sender replaying a backlog after an outage or a cut, or a " +
				"clock slower than detect.max_clock_lag: McpAuditClockBehind): stored, never judged, so findings about them " +
				"may be missing. mcpaudit status (or /api/v1/status) names the sources and the event-time span not judged.",
		}),
		b.rule(alert{
			name: "McpAuditIDCollisions",
			// Any: each collision is a call stored and never judged. Plain
			// increase(), not newEvents: a restart's replay counts again the
			// collisions it meets, and the series it is born with after a
			// start is not new. The 15m window and the 5m for let a burst
			// (a replay tool rewriting ids) and a steady stream (an exporter
			// reusing ids) both fire, and keep the alert up 15m after the
			// last collision for the runbook's log search.
			expr:     fmt.Sprintf("sum by (%s) (increase(%s[15m])) > 0", byServer, metrics.PipelineIDCollisionsTotal),
			for_:     5 * time.Minute,
			severity: SeverityWarning,
			summary:  "Different calls came under one id: some calls are not judged.",
			description: eventCount + " call(s) to server {{ $labels.server }} in the last 15m came under the id of " +
				"a different call: another exchange under the same trace and span id (an exporter that reuses ids, or a " +
				"replay tool rewriting them), stored and never judged; or another response to the same request at the " +
				"same millisecond, neither stored nor judged. Findings about them may be missing. The collector's WARN " +
				"lines kind=id_collision name the sources, both calls and what differs.",
		}),
		b.rule(alert{
			name: "McpAuditSourcesOverflow",
			// Any, as for collisions: each such call is judged under a clock
			// that is not its sender's. increase() over 15m, for 5m: a flood
			// of new names (a sender naming a new source per request) fires,
			// one restart's scrape does not.
			expr:     fmt.Sprintf("sum by (%s) (increase(%s[15m])) > 0", byServer, metrics.PipelineSourceOverflowCallsTotal),
			for_:     5 * time.Minute,
			severity: SeverityWarning,
			summary:  "More senders than detect.max_sources: some are no longer followed one by one.",
			description: eventCount + " call(s) to server {{ $labels.server }} in the last 15m came from senders new to a " +
				"partition that already kept detect.max_sources senders, none quiet: they are stored and judged under the " +
				"partition's overflow source, whose clock follows the latest of them, so the calls of a lagging one among " +
				"them can be judged late or too late. The collector's WARN lines kind=source_overflow name the partition; " +
				"mcpaudit status gives overflow_calls per partition.",
		}),
		b.rule(alert{
			name: "McpAuditClockAhead",
			// Any, as for overflow: each such call is judged at a time its
			// sender's clock made up. increase() over 15m, for 5m: a sender
			// whose clock runs fast keeps it up; one call of a clock stepped
			// back into place does not page for long.
			expr:     fmt.Sprintf("sum by (%s) (increase(%s[15m])) > 0", byServer, metrics.PipelineClockAheadCallsTotal),
			for_:     5 * time.Minute,
			severity: SeverityWarning,
			summary:  "A sender's clock runs ahead of the collector's.",
			description: eventCount + " call(s) to server {{ $labels.server }} in the last 15m were dated more than " +
				"detect.max_clock_skew ahead of the collector's clock: their sender's clock (or the collector's) is wrong. " +
				"They are judged on arrival, dated where the clock put them: their findings and write states are dated " +
				"ahead, and a window of theirs (an unverified write) closes only when the watermark reaches that date. " +
				"mcpaudit status names the source (AHEAD column).",
		}),
		b.rule(alert{
			name: "McpAuditClockBehind",
			// As for a clock ahead: any, over 15m, for 5m. These calls are
			// counted too late as well (McpAuditCallsNotJudged fires too);
			// this one says the cause is the sender's clock, not a backlog.
			expr:     fmt.Sprintf("sum by (%s) (increase(%s[15m])) > 0", byServer, metrics.PipelineClockBehindCallsTotal),
			for_:     5 * time.Minute,
			severity: SeverityWarning,
			summary:  "A sender's clock runs behind the collector's by more than detect.max_clock_lag.",
			description: eventCount + " call(s) to server {{ $labels.server }} in the last 15m came from a sender that never " +
				"delivered a call dated within detect.max_clock_lag of its arrival: its clock is slow (or it sends a backlog " +
				"that old under a name new to the server). They are stored and never judged (too late), so findings about " +
				"them are missing for as long as it sends. mcpaudit status names the source (BEHIND column); the collector " +
				"logs kind=clock_behind_calls once per source.",
		}),
		b.rule(alert{
			name:     "McpAuditCollectorDown",
			expr:     up + " == 0",
			for_:     5 * time.Minute,
			severity: SeverityCritical,
			summary:  "The mcpaudit collector cannot be scraped.",
			description: "Prometheus has failed to scrape {{ $labels.instance }} of job {{ $labels.job }} for 5 minutes: " +
				"MCP writes are not being audited and no other mcpaudit alert can fire.",
		}),
		// A gauge, not a counter: each start is a new process whose
		// counters begin at 0 (all but the findings counters, which go on
		// from the state file), so no increase() sees the restart. The
		// state file keeps the crash, so a clean restart within the hour
		// leaves it firing; a clean stop never fires it.
		b.rule(alert{
			name: "McpAuditServeCrashed",
			expr: fmt.Sprintf(`time() - max by (job, instance) (%s{%s="%s"}) < %s`,
				metrics.ServeRestartTimestampSeconds, metrics.LabelEnd, audit.EndCrash, number(crashWindow.Seconds())),
			severity: SeverityWarning,
			summary:  "mcpaudit serve started again after a crash, not a clean stop.",
			description: "Collector {{ $labels.instance }} of job {{ $labels.job }} started again {{ $value | humanizeDuration }} ago " +
				"after a run that did not stop cleanly (killed, OOM-killed, crashed, its host lost, or a commit that failed at its stop). " +
				"Calls sent while it was down are missing unless their senders kept them (otlptracehttp keeps none); " +
				"mcpaudit status names the downtime (Downtimes:).",
		}),
		b.rule(alert{
			name:     "McpAuditCollectorAbsent",
			expr:     "absent(" + up + ")",
			for_:     10 * time.Minute,
			severity: SeverityCritical,
			summary:  "No mcpaudit collector is known to Prometheus.",
			description: "Prometheus has had no scrape target of job {{ $labels.job }} for 10 minutes: MCP writes are " +
				"not being audited and no other mcpaudit alert can fire.",
		}),
	}
}

// crashWindow is how long McpAuditServeCrashed fires after the restart
// that followed a crash.
const crashWindow = time.Hour

// storeAlerts watch the faults of the store in use (metrics.WatchStore),
// per collector. A fault found at start (a spool file left damaged by a
// crash, drained at Open) makes a series born non-zero: newEvents counts it.
func (b *builder) storeAlerts() []Rule {
	by := "job, instance"
	fault := func(f string) string {
		return fmt.Sprintf(`%s{%s="%s"}`, metrics.StoreFaultsTotal, metrics.LabelFault, f)
	}
	return []Rule{
		b.rule(alert{
			name:     "McpAuditSpoolFileRejected",
			expr:     newEvents(fault(metrics.FaultSpoolFileRejected), by, eventWindow) + " > 0",
			severity: SeverityCritical,
			summary:  "Acknowledged calls were set aside and will not reach the store.",
			description: "Collector {{ $labels.instance }} of job {{ $labels.job }} moved " + eventCount + " spool file(s) " +
				"aside as .rejected in the last 10m, damaged or refused by the store for good. Their calls were " +
				"acknowledged to the senders and will not reach the store unless a person acts; the collector's " +
				"error log names each file.",
		}),
		b.rule(alert{
			name:     "McpAuditIDIndexWriteFailures",
			expr:     newEvents(fault(metrics.FaultIDIndexWrite), by, time.Hour) + " > 0",
			severity: SeverityWarning,
			summary:  "Writes of the embedded store's call id index fail.",
			description: "Collector {{ $labels.instance }} of job {{ $labels.job }} failed " + eventCount + " write(s) of " +
				"its call id index in the last hour. Nothing is lost: lookups by call id scan the calls past the " +
				"index, slower, until it catches up; the collector's error log says why.",
		}),
		b.rule(alert{
			name:     "McpAuditIDIndexCorrupt",
			expr:     newEvents(fault(metrics.FaultIDIndexCorrupt), by, time.Hour) + " > 0",
			severity: SeverityWarning,
			summary:  "The embedded store's call id index has a corrupt block.",
			description: "Collector {{ $labels.instance }} of job {{ $labels.job }} met a corrupt block of its call id index " +
				eventCount + " time(s) in the last hour. Nothing is lost: lookups that meet it scan the calls, " +
				"slower. The damage stays until a person stops serve and deletes mcpaudit.db.ids; the next start rebuilds it.",
		}),
		// The count above pages when a file is set aside; this one keeps
		// reminding while it is there, across restarts (the count starts
		// again from 0).
		b.rule(alert{
			name: "McpAuditSpoolFilesSetAside",
			expr: fmt.Sprintf(`max by (%s) (%s{%s="%s"}) > 0`, by, metrics.SpoolFilesSetAside,
				metrics.LabelFile, metrics.FileRejected),
			for_:     time.Hour,
			severity: SeverityWarning,
			summary:  "Spool files of acknowledged calls wait for a person.",
			description: "The spool directory of collector {{ $labels.instance }} of job {{ $labels.job }} has held " +
				"{{ $value | humanize }} .rejected file(s) for an hour: acknowledged calls that are not in the store. " +
				"Handle each as the runbook of McpAuditSpoolFileRejected says, then move it out of the directory.",
		}),
		// Warning, not critical: recovery cannot tell the expected torn
		// tail of a crash from an acknowledged last frame damaged on disk
		// (docs/runbooks.md#mcpauditspooltailcut).
		b.rule(alert{
			name:     "McpAuditSpoolTailCut",
			expr:     newEvents(fault(metrics.FaultSpoolTailCut), by, time.Hour) + " > 0",
			severity: SeverityWarning,
			summary:  "A torn tail was cut off a spool segment at start.",
			description: "Collector {{ $labels.instance }} of job {{ $labels.job }} cut " + eventCount + " torn tail(s) off " +
				"its spool segments when it started, kept as NNNN.log.TIME.torn. After a crash these are unacknowledged " +
				"writes and harmless; after a clean stop, the last frame may be acknowledged calls damaged on disk.",
		}),
		// Before the first refusal: a log past half its limit for 10m is
		// a store that does not keep up, or one that is down.
		b.rule(alert{
			name:     "McpAuditSpoolFilling",
			expr:     fmt.Sprintf(`max by (%s) (%s / %s) > 0.5`, by, metrics.SpoolBytes, metrics.SpoolLimitBytes),
			for_:     10 * time.Minute,
			severity: SeverityWarning,
			summary:  "The log of acknowledged calls waiting for the store is filling.",
			description: "The local log of acknowledged calls of collector {{ $labels.instance }} of job {{ $labels.job }} " +
				"has been more than half full for 10m ({{ $value | humanizePercentage }} now): the store does not keep up " +
				"(ClickHouse down or slow, or the embedded store's commits slower than the acknowledgements). " +
				"When it is full the collector refuses calls (503) and the senders must hold them.",
		}),
		// Found from outside by live20: ClickHouse killed for 69 s under
		// 250 calls/s left /readyz 503 the whole time and no alert
		// pending; the spool's would have fired after 2.7 h. Warning: the
		// senders see nothing yet (their calls are acknowledged from the
		// spool or call log); queries, the API and the page fail.
		b.rule(alert{
			name:     "McpAuditStoreUnavailable",
			expr:     fmt.Sprintf(`min by (%s) (%s) == 0`, by, metrics.StoreReady),
			for_:     5 * time.Minute,
			severity: SeverityWarning,
			summary:  "The store of a collector is not ready.",
			description: "The store of collector {{ $labels.instance }} of job {{ $labels.job }} has not been ready for 5m " +
				"(/readyz 503): ClickHouse unreachable or its spool still draining, the embedded store's call log not " +
				"committed, or the embedded store's disk full. Calls are still acknowledged while the spool or call log has " +
				"room (on a full disk those the store cannot write are refused 503 until it has room); queries, the API and " +
				"the page fail meanwhile, and findings wait. /readyz and mcpaudit status say why and how much waits.",
		}),
		// Found by wd21: a withdrawal the store refuses as unavailable is
		// retried at every commit, and nothing else tells it. Warning:
		// the findings are right, the store shows some open that the
		// detector took back. 30m: a store outage alone ends sooner, and
		// McpAuditStoreUnavailable tells it.
		b.rule(alert{
			name:     "McpAuditWithdrawalsWaiting",
			expr:     fmt.Sprintf(`max by (%s) (%s) > 0`, by, metrics.WithdrawalsWaiting),
			for_:     30 * time.Minute,
			severity: SeverityWarning,
			summary:  "The store keeps refusing the withdrawal of findings the detector took back.",
			description: "Collector {{ $labels.instance }} of job {{ $labels.job }} has had {{ $value }} withdrawal(s) of stored " +
				"unverified_write findings refused by its store for 30m, retried at every commit: the store, mcpaudit findings " +
				"and mcpaudit report show those findings open though a call judged late proved their writes settled.",
		}),
		// Critical: what the senders see. A refusal lasting under the
		// rate window (one busy commit) does not page; a full spool, or
		// commits failing on a full disk (the store not ready meanwhile:
		// McpAuditStoreUnavailable), keep refusing every retry.
		b.rule(alert{
			name: "McpAuditStoreRefusingCalls",
			expr: fmt.Sprintf(`sum by (%s) (rate(%s{%s="%s"}[2m])) > 0`, by, metrics.IngestRejectedTotal,
				metrics.LabelReason, metrics.RejectStoreDown),
			for_:     5 * time.Minute,
			severity: SeverityCritical,
			summary:  "A collector refuses calls because its store cannot take them.",
			description: "Collector {{ $labels.instance }} of job {{ $labels.job }} has refused records as store_unavailable " +
				"(503) for 5m, {{ $value | printf \"%.2f\" }}/s now: its spool or call log is full (the store down long enough to " +
				"fill it: McpAuditStoreUnavailable and McpAuditSpoolFilling came first), or the embedded store's commits fail " +
				"(a full disk). Senders that keep their calls retry them; those that keep none (otlptracehttp after its " +
				"retries) lose them to the audit.",
		}),
	}
}

// relayAlerts watch the capture relays (mcpaudit proxy and wrap), which
// export their own metrics on --metrics-listen under a job of their own:
// they are grouped by job and instance, whatever the job is called.
func (b *builder) relayAlerts() []Rule {
	by := "job, instance"
	dropped := fmt.Sprintf(`%s{%s="%s"}`, metrics.ProxyForwardRecordsTotal, metrics.LabelResult, metrics.ForwardDropped)
	sent := fmt.Sprintf(`%s{%s="%s"}`, metrics.ProxyForwardRecordsTotal, metrics.LabelResult, metrics.ForwardSent)
	return []Rule{
		b.rule(alert{
			name:     "McpAuditRelayDroppingRecords",
			expr:     fmt.Sprintf("sum by (%s) (increase(%s[10m])) > 0", by, dropped),
			severity: SeverityCritical,
			summary:  "A capture relay is losing call records.",
			description: "Relay {{ $labels.instance }} of job {{ $labels.job }} dropped " + eventCount + " call record(s) " +
				"in the last 10m: its disk buffer is full or cannot be written. The calls were relayed to the MCP server " +
				"but will never be audited.",
		}),
		b.rule(alert{
			name: "McpAuditRelayNotDelivering",
			expr: fmt.Sprintf("max by (%s) (%s) > 0\nunless on (%s)\nsum by (%s) (increase(%s[15m])) > 0",
				by, metrics.ProxyBufferBytes, by, by, sent),
			for_:     15 * time.Minute,
			severity: SeverityWarning,
			summary:  "A capture relay cannot deliver its records to the collector.",
			description: "Relay {{ $labels.instance }} of job {{ $labels.job }} holds {{ $value | humanize1024 }}B of call " +
				"records on disk and the collector has accepted none of them for 15 minutes: the collector is unreachable " +
				"or refuses the relay's credential. The records are kept until the buffer is full, then dropped.",
		}),
	}
}
