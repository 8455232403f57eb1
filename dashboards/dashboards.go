package dashboards

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/units"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/rules"
)

// Dashboard uids: fixed, so links and provisioning survive regeneration.
const (
	UIDTraffic   = "mcpaudit-traffic"
	UIDSLO       = "mcpaudit-slo"
	UIDFailures  = "mcpaudit-failures"
	UIDFindings  = "mcpaudit-findings"
	UIDCollector = "mcpaudit-collector"
	UIDRelays    = "mcpaudit-relays"
)

// All builds every dashboard, in a fixed order.
func All() ([]dashboard.Dashboard, error) {
	builders := []*dashboard.DashboardBuilder{traffic(), slo(), failures(), findings(), collector(), relays()}
	out := make([]dashboard.Dashboard, 0, len(builders))
	for _, b := range builders {
		d, err := b.Build()
		if err != nil {
			return nil, fmt.Errorf("cannot build dashboard: %w", err)
		}
		layout(&d)
		// Stable panel ids, in grid order.
		for i, p := range d.Panels {
			if p.Panel != nil {
				id := uint32(i + 1)
				p.Panel.Id = &id
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// Render returns the JSON of every dashboard by file name (<uid>.json).
func Render() (map[string][]byte, error) {
	ds, err := All()
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, d := range ds {
		b, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("cannot encode dashboard %s: %w", *d.Uid, err)
		}
		out[*d.Uid+".json"] = append(b, '\n')
	}
	return out, nil
}

// link is a dashboard link that opens in a new tab.
func link(title, tooltip, url string) *dashboard.DashboardLinkBuilder {
	return dashboard.NewDashboardLinkBuilder(title).Type(dashboard.DashboardLinkTypeLink).
		Url(url).Tooltip(tooltip).Icon("external link").TargetBlank(true)
}

// states renders a regex of write states.
func states(s ...audit.WriteState) string { return rules.StateRegex(s) }

// kinds renders a regex of finding kinds.
func kinds(k ...audit.Kind) string {
	s := make([]string, len(k))
	for i, kind := range k {
		s[i] = string(kind)
	}
	return strings.Join(s, "|")
}

func traffic() *dashboard.DashboardBuilder {
	calls := metrics.ToolCallsTotal
	terminal := rules.TerminalStates
	return newBoard(UIDTraffic, "mcpaudit / MCP write traffic",
		"MCP tools/call traffic seen by mcpaudit: calls by outcome and tool, latency, and what became of every write.").
		WithPanel(graph("Calls by outcome",
			"tools/call exchanges per second by outcome: ok, tool_error (isError true), protocol_error (a JSON-RPC error) and no_response.",
			units.RequestsPerSecond,
			query(fmt.Sprintf("sum by (%s) (rate(%s[%s]))", metrics.LabelOutcome, sel(calls, serverMatcher), rate), "{{outcome}}"))).
		WithPanel(graph("Call failure ratio",
			"Share of calls whose outcome is not ok, per server.",
			units.PercentUnit,
			query(fmt.Sprintf("sum by (%s) (rate(%s[%s]))\n/\nsum by (%s) (rate(%s[%s]))",
				metrics.LabelServer, sel(calls, serverMatcher, `outcome!="ok"`), rate,
				metrics.LabelServer, sel(calls, serverMatcher), rate), "{{server}}"))).
		WithPanel(graph("Calls by tool",
			"tools/call exchanges per second by server and tool. Tools a dialect does not know are counted as other.",
			units.RequestsPerSecond,
			query(fmt.Sprintf("sum by (%s, %s) (rate(%s[%s]))", metrics.LabelServer, metrics.LabelTool, sel(calls, serverMatcher), rate),
				"{{server}} {{tool}}"))).
		WithPanel(graph("Call latency",
			"Quantiles of the tools/call duration, from the buckets of the MCP semantic conventions.",
			units.Seconds,
			quantiles(metrics.ToolCallDurationSeconds, "", serverMatcher)...)).
		WithPanel(graph("p95 latency by tool",
			"95th percentile of the tools/call duration per server and tool.",
			units.Seconds,
			query(fmt.Sprintf("histogram_quantile(0.95, sum by (%s, %s, le) (rate(%s[%s])))",
				metrics.LabelServer, metrics.LabelTool, sel(metrics.ToolCallDurationSeconds+"_bucket", serverMatcher), rate),
				"{{server}} {{tool}}"))).
		WithPanel(graph("Writes by state",
			"Write attempts per second by their latest terminal state: durable, resolved, rejected, unverified, double_applied, each write once. "+
				"A write that moved from one state to another (an unverified write a call judged late proved applied, a durable one found double-applied) "+
				"is taken out of the state it left in the interval it moved, which can then read below zero for that state.",
			units.OpsPerSecond,
			query(rules.LatestByStateExpr("rate", terminal, "", serverMatcher, rate), "{{state}}"))).
		WithPanel(graph("Writes re-judged",
			"Writes per second that moved from one terminal state to another (from, to): mostly unverified writes that a call judged late "+
				"(within allowed_lateness) proved durable or resolved. The SLI counts each of them once, under the state it moved to.",
			units.OpsPerSecond,
			query(fmt.Sprintf("sum by (%s, %s) (rate(%s[%s]))", metrics.LabelFrom, metrics.LabelTo,
				sel(metrics.WritesRejudgedTotal, serverMatcher), rate), "{{from}} to {{to}}"))).
		WithPanel(graph("Pending writes",
			"Writes inside their verification window, per server. It should rise and fall with traffic, never only rise.",
			units.Short,
			query(fmt.Sprintf("sum by (%s) (%s)", metrics.LabelServer, sel(metrics.WritesPending, serverMatcher)), "{{server}}"))).
		WithPanel(graph("Unverified and double-applied writes",
			"Double-applied writes per server in each interval, and unverified writes as the alert McpAuditUnverifiedWrites counts them: "+
				"unverified_write findings made less those withdrawn (a call judged late proved the write applied; "+
				"mcpaudit_writes_rejudged_total counts the write's move). A withdrawal comes within "+
				"allowed_lateness of the finding and is subtracted in its own interval, which can then read below zero.",
			units.Short,
			query(fmt.Sprintf("sum by (%s, %s) (increase(%s[%s]))", metrics.LabelServer, metrics.LabelState,
				rules.WritesSelector([]audit.WriteState{audit.StateDoubleApplied}, serverMatcher), rate), "{{server}} {{state}}"),
			query(fmt.Sprintf("sum by (%s) (increase(%s[%s]))\n-\nsum by (%s) (increase(%s[%s]))",
				metrics.LabelServer, sel(metrics.FindingsTotal, serverMatcher, unverifiedKind), rate,
				metrics.LabelServer, sel(metrics.FindingsWithdrawnTotal, serverMatcher, unverifiedKind), rate),
				"{{server}} unverified"))).
		WithPanel(grid("Writes by server, tool and state",
			"Write attempts by their latest terminal state over the dashboard's time range, each write once (a write proved applied "+
				"by a call judged late counts under the state it moved to, and is taken out of unverified).",
			units.Short,
			rows(rules.LatestByStateExpr("increase", terminal, metrics.LabelServer+", "+metrics.LabelTool, serverMatcher, "$__range"))))
}

func slo() *dashboard.DashboardBuilder {
	// Every SLO query reads the rules' recordings: the rates per job and
	// server sum over the selected servers, and the target is the one the
	// alerts were built for (rules.Objective), not a second copy.
	ratio := func(window time.Duration) string {
		return fmt.Sprintf("sum(%s)\n/\nsum(%s)",
			sel(rules.ErrorRate(window), serverMatcher), sel(rules.CountedRate(window), serverMatcher))
	}
	budget := "(1 - scalar(" + rules.Objective + "))"
	page := "${" + VarMCPAuditURL + "}"
	b := newBoard(UIDSLO, "mcpaudit / write durability SLO",
		"The write-durability SLI, (durable + resolved) / (durable + resolved + unverified + double_applied), its error budget and burn rates, from the recording rules of deploy/prometheus/rules.yaml; the target is the one the rules were generated for.",
		"slo").
		WithPanel(single("SLO target",
			"The write-durability objective the recording and alerting rules were generated for (mcpaudit rules --slo-target). Empty when the rules are not loaded.",
			units.PercentUnit,
			instant(rules.Objective)).Span(4)).
		WithVariable(mcpauditURLVar()).
		Link(link("SLO (page)", "The SLO on the investigation page: burn-down, worst documents, tools and clients", page+"/slo")).
		Link(link("Bad events (page)", "Unverified and double-applied writes' findings on the investigation page", page+"/?severity=warning")).
		WithPanel(single("SLI, 30 days",
			"Share of the writes counted by the SLI that ended durable or resolved over the last 30 days.",
			units.PercentUnit,
			instant("1 - (\n"+ratio(30*24*time.Hour)+"\n)")).Span(4)).
		WithPanel(single("Error budget left, 30 days",
			"Share of the 30-day error budget (1 - target) not yet spent. Below zero, the SLO is missed.",
			units.PercentUnit,
			instant("1 - (\n"+ratio(30*24*time.Hour)+"\n) / "+budget)).Span(4)).
		WithPanel(single("Burn rate, 1 hour",
			"How fast the error budget is spent over the last hour: 1 spends exactly the budget in 30 days; the fast-burn page fires above 14.4.",
			units.NoUnit,
			instant("(\n"+ratio(time.Hour)+"\n) / "+budget)).Span(4)).
		WithPanel(single("Burn rate, 6 hours",
			"How fast the error budget is spent over the last 6 hours; the medium-burn page fires above 6.",
			units.NoUnit,
			instant("(\n"+ratio(6*time.Hour)+"\n) / "+budget)).Span(4)).
		WithPanel(single("Burn rate, 3 days",
			"How fast the error budget is spent over the last 3 days; the slow-burn ticket fires above 1.",
			units.NoUnit,
			instant("(\n"+ratio(3*24*time.Hour)+"\n) / "+budget)).Span(4))
	var burns []*prometheus.DataqueryBuilder
	for _, w := range []time.Duration{5 * time.Minute, time.Hour, 6 * time.Hour, 3 * 24 * time.Hour} {
		burns = append(burns, query("(\n"+ratio(w)+"\n) / "+budget, rules.Duration(w)))
	}
	return b.
		WithPanel(graph("Burn rate by window",
			"Error ratio over each alert window divided by the error budget. The pages need both 1h and 5m above 14.4, or 6h and 30m above 6; the ticket both 3d and 6h above 1.",
			units.NoUnit, burns...)).
		WithPanel(graph("SLI by server, 1 hour",
			"The SLI over a sliding hour, per server.",
			units.PercentUnit,
			query("1 - "+sel(rules.ErrorRatio(rules.LevelServer, time.Hour), serverMatcher), "{{server}}"))).
		WithPanel(graph("Writes counted by the SLI",
			"Writes per second in each state the SLI counts, each write once by its latest state (as the recording rules count them); "+
				"rejected and pending writes are outside it. An unverified write a call judged late proved applied is taken out of unverified "+
				"in the interval it moved, which can then read below zero.",
			units.OpsPerSecond,
			query(rules.LatestByStateExpr("rate", rules.CountedStates, "", serverMatcher, rate), "{{state}}"))).
		WithPanel(graph("Verification latency",
			"Event time from a pending write to the proof that made it durable or resolved (a replay under the same key, or a read of the target).",
			units.Seconds,
			quantiles(metrics.WriteVerificationSeconds, "", serverMatcher)...))
}

func failures() *dashboard.DashboardBuilder {
	f := metrics.CallFailuresTotal
	retryKinds := kinds(audit.KindWastedRetry, audit.KindUnsafeRetry, audit.KindPrematureRetry, audit.KindRequestIDReuse)
	uncertain := string(audit.ActionReplaySameRequest) + "|" + string(audit.ActionVerifyThenDecide)
	return newBoard(UIDFailures, "mcpaudit / failures by retry action",
		"Failed and uncertain calls classified by what a correct client must do next, and how clients actually respond.").
		WithPanel(graph("Failures by retry action",
			"Failed or uncertain calls and provider calls per second, by the retry action a correct client must take.",
			units.OpsPerSecond,
			query(fmt.Sprintf("sum by (%s) (rate(%s[%s]))", metrics.LabelRetryAction, sel(f, serverMatcher), rate), "{{retry_action}}"))).
		WithPanel(graph("Failures by code",
			"Failures per second by error code; codes outside the known set are counted as other.",
			units.OpsPerSecond,
			query(fmt.Sprintf("sum by (%s) (rate(%s[%s]))", metrics.LabelCode, sel(f, serverMatcher), rate), "{{code}}"))).
		WithPanel(graph("Uncertain outcomes",
			"Failures whose outcome is unknown (retry action replay_same_request or verify_then_decide), per server and code. Each one is a pending write that a client must resolve.",
			units.OpsPerSecond,
			query(fmt.Sprintf("sum by (%s, %s) (rate(%s[%s]))", metrics.LabelServer, metrics.LabelCode,
				sel(f, serverMatcher, fmt.Sprintf(`%s=~"%s"`, metrics.LabelRetryAction, uncertain)), rate), "{{server}} {{code}}"))).
		WithPanel(graph("Client responses",
			"Findings about how clients retry, per second: wasted_retry and premature_retry (could not help), unsafe_retry (risked a double application), request_id_reuse.",
			units.OpsPerSecond,
			query(fmt.Sprintf("sum by (%s) (rate(%s[%s]))", metrics.LabelKind,
				sel(metrics.FindingsTotal, serverMatcher, fmt.Sprintf(`%s=~"%s"`, metrics.LabelKind, retryKinds)), rate), "{{kind}}"))).
		WithPanel(graph("Retry findings per call",
			"Retry findings as a share of all calls, per server and kind. McpAuditWastedRetries fires when wasted and premature retries pass 5% for 30 minutes.",
			units.PercentUnit,
			query(fmt.Sprintf("sum by (%s, %s) (rate(%s[%s]))\n/ on (%s) group_left\nsum by (%s) (rate(%s[%s]))",
				metrics.LabelServer, metrics.LabelKind,
				sel(metrics.FindingsTotal, serverMatcher, fmt.Sprintf(`%s=~"%s"`, metrics.LabelKind, retryKinds)), rate,
				metrics.LabelServer, metrics.LabelServer, sel(metrics.ToolCallsTotal, serverMatcher), rate), "{{server}} {{kind}}")).Span(GridWidth)).
		WithPanel(grid("Failing tools",
			"The 20 server, tool, code and retry action combinations with the most failures over the dashboard's time range.",
			units.Short,
			rows(fmt.Sprintf("topk(20, sum by (%s, %s, %s, %s) (increase(%s[$__range])))",
				metrics.LabelServer, metrics.LabelTool, metrics.LabelCode, metrics.LabelRetryAction, sel(f, serverMatcher)))))
}

func findings() *dashboard.DashboardBuilder {
	fd := metrics.FindingsTotal
	api := "${" + VarMCPAuditURL + "}/api/v1"
	page := "${" + VarMCPAuditURL + "}"
	table := grid("Findings by server, kind and severity",
		"Findings over the dashboard's time range. The link on a row lists those findings in the mcpaudit API.",
		units.Short,
		rows(fmt.Sprintf("sum by (%s, %s, %s) (increase(%s[$__range])) > 0",
			metrics.LabelServer, metrics.LabelKind, metrics.LabelSeverity, sel(fd, serverMatcher))))
	table.DataLinks([]cog.Builder[dashboard.DashboardLink]{
		dashboard.NewDashboardLinkBuilder("Investigate these findings").
			Url(page + "/?kind=${__data.fields.kind}&server=${__data.fields.server}").TargetBlank(true),
		dashboard.NewDashboardLinkBuilder("Findings of this kind (API)").
			Url(api + "/findings?kind=${__data.fields.kind}&server=${__data.fields.server}").TargetBlank(true),
	})
	return newBoard(UIDFindings, "mcpaudit / findings",
		"Findings by kind and severity over time, with links to the mcpaudit API to investigate them.").
		WithVariable(mcpauditURLVar()).
		Link(link("Findings (page)", "The investigation page: findings newest first, with their evidence", page+"/")).
		Link(link("Double-applied writes (page)", "Double-applied writes on the investigation page", page+"/?kind=double_applied_write")).
		Link(link("SLO (page)", "The write-durability SLO, burn-down and top documents on the investigation page", page+"/slo")).
		Link(link("Findings (API)", "GET /api/v1/findings: every stored finding", api+"/findings")).
		Link(link("Double-applied writes (API)", "GET /api/v1/findings?kind=double_applied_write", api+"/findings?kind=double_applied_write")).
		Link(link("Unverified writes (API)", "GET /api/v1/findings?kind=unverified_write", api+"/findings?kind=unverified_write")).
		Link(link("SLO, 30 days (API)", "GET /api/v1/slo?window=30d", api+"/slo?window=30d")).
		WithPanel(single("Critical findings",
			"double_applied_write, duplicate_create and integrity_failure findings over the dashboard's time range. Each one pages.",
			units.Short,
			instant(fmt.Sprintf("sum(increase(%s[$__range]))", sel(fd, serverMatcher, metrics.LabelSeverity+`="critical"`))))).
		WithPanel(single("Warning findings",
			"unverified_write, unsafe_retry and request_id_reuse findings over the dashboard's time range.",
			units.Short,
			instant(fmt.Sprintf("sum(increase(%s[$__range]))", sel(fd, serverMatcher, metrics.LabelSeverity+`="warning"`))))).
		WithPanel(single("Info findings",
			"wasted_retry and premature_retry findings over the dashboard's time range.",
			units.Short,
			instant(fmt.Sprintf("sum(increase(%s[$__range]))", sel(fd, serverMatcher, metrics.LabelSeverity+`="info"`))))).
		WithPanel(single("Servers with critical findings",
			"How many servers had a critical finding over the dashboard's time range.",
			units.Short,
			instant(fmt.Sprintf("count(sum by (%s) (increase(%s[$__range])) > 0) or vector(0)",
				metrics.LabelServer, sel(fd, serverMatcher, metrics.LabelSeverity+`="critical"`))))).
		WithPanel(graph("Findings by kind",
			"New findings in each interval, by kind.",
			units.Short,
			query(fmt.Sprintf("sum by (%s) (increase(%s[%s]))", metrics.LabelKind, sel(fd, serverMatcher), rate), "{{kind}}"))).
		WithPanel(graph("Findings by severity",
			"New findings in each interval, by severity: critical pages, warning goes to the work queue, info is context.",
			units.Short,
			query(fmt.Sprintf("sum by (%s) (increase(%s[%s]))", metrics.LabelSeverity, sel(fd, serverMatcher), rate), "{{severity}}"))).
		WithPanel(graph("Findings withdrawn by kind",
			"Findings taken back in each interval, by kind: an unverified_write whose write a late call (within allowed_lateness) showed settled or retried inside its window. The counts above include them; the API and the page leave them out unless asked (state=withdrawn).",
			units.Short,
			query(fmt.Sprintf("sum by (%s) (increase(%s[%s]))", metrics.LabelKind, sel(metrics.FindingsWithdrawnTotal, serverMatcher), rate), "{{kind}}"))).
		WithPanel(table).
		WithPanel(grid("Age of the newest finding",
			"Wall-clock time since the event time of the newest finding of each server and kind. The critical finding alerts fire only while it is below the rules' finding_max_age (2h by default): findings about the past, from an old capture, do not page.",
			units.Seconds,
			rows(fmt.Sprintf("time() - max by (%s, %s) (%s)", metrics.LabelServer, metrics.LabelKind,
				sel(metrics.FindingLastEventTimestampSeconds, serverMatcher)))))
}

func collector() *dashboard.DashboardBuilder {
	return newBoard(UIDCollector, "mcpaudit / collector health",
		"The mcpaudit service itself: ingestion by source, rejections, pending writes, store latency and faults, versions, Go runtime and process.").
		WithPanel(single("Targets up",
			"mcpaudit targets that Prometheus scraped successfully at the last scrape, out of those it knows.",
			units.Short,
			instant(fmt.Sprintf("sum(up{%s})", jobMatcher)))).
		WithPanel(single("Records ingested",
			"Records (call records or spans) stored for the first time over the dashboard's time range; duplicates, rejected and ignored records are not counted.",
			units.Short,
			instant(fmt.Sprintf(`sum(increase(%s[$__range]))`, sel(metrics.IngestRecordsTotal, jobMatcher, metrics.LabelResult+`="`+metrics.ResultAccepted+`"`))))).
		WithPanel(single("Records rejected",
			"Records rejected over the dashboard's time range; the senders got the reason.",
			units.Short,
			instant(fmt.Sprintf(`sum(increase(%s[$__range]))`, sel(metrics.IngestRejectedTotal, jobMatcher))))).
		WithPanel(single("Pending writes",
			"Writes inside their verification window now, all selected servers.",
			units.Short,
			instant(fmt.Sprintf("sum(%s)", sel(metrics.WritesPending, serverMatcher))))).
		WithPanel(graph("Ingested records",
			"Records per second by source and result, each record under one: accepted (stored for the first time), duplicate (an exchange already seen: a re-sent batch or another carrier), rejected, or ignored (not an MCP tools/call).",
			units.OpsPerSecond,
			query(fmt.Sprintf("sum by (%s, %s) (rate(%s[%s]))", metrics.LabelSource, metrics.LabelResult,
				sel(metrics.IngestRecordsTotal, jobMatcher), rate), "{{source}} {{result}}"))).
		WithPanel(graph("Rejected records by reason",
			"Rejected records per second by source and reason.",
			units.OpsPerSecond,
			query(fmt.Sprintf("sum by (%s, %s) (rate(%s[%s]))", metrics.LabelSource, metrics.LabelReason,
				sel(metrics.IngestRejectedTotal, jobMatcher), rate), "{{source}} {{reason}}"))).
		WithPanel(graph("Records read leniently by reason",
			"Call records kept though part of them was read leniently, per second by source and reason: a name given twice (read from its last copy, as the MCP SDKs do) or a member of the wrong type (read as documented in docs/api.md, \"Members read leniently\"). The senders' answers and serve's log name the line and field. A steady rate from one source is a client or exporter to fix; the records are judged either way.",
			units.OpsPerSecond,
			query(fmt.Sprintf("sum by (%s, %s) (rate(%s[%s]))", metrics.LabelSource, metrics.LabelReason,
				sel(metrics.IngestWarningsTotal, jobMatcher), rate), "{{source}} {{reason}}"))).
		WithPanel(graph("Pending writes by server",
			"Writes inside their verification window. If it never falls, windows are not closing (McpAuditWritesPendingNotDraining).",
			units.Short,
			query(fmt.Sprintf("sum by (%s) (%s)", metrics.LabelServer, sel(metrics.WritesPending, serverMatcher)), "{{server}}"))).
		WithPanel(graph("Store commit latency",
			"Duration of commits to the embedded store, observed by mcpaudit serve.",
			units.Seconds,
			quantiles(metrics.StoreCommitSeconds, "", jobMatcher)...)).
		WithPanel(graph("Store faults",
			"Faults of the store in use, by instance and fault, each counted when it happens: id_index_write, a failed write of the embedded store's call id index (nothing lost, lookups by id slower until it catches up; McpAuditIDIndexWriteFailures); id_index_corrupt, a corrupt block met in that index (lookups scan the calls until a person deletes the index to rebuild it; McpAuditIDIndexCorrupt); spool_file_rejected, a file of acknowledged calls of the ClickHouse spool (or of the embedded store's call log) moved aside as .rejected, whose calls will not reach the store unless a person acts (McpAuditSpoolFileRejected pages); spool_tail_cut, a torn tail cut off a segment of that log at start and kept as .torn, expected after a crash (McpAuditSpoolTailCut). Flat at zero is healthy.",
			units.Short,
			query(fmt.Sprintf("sum by (instance, %s) (increase(%s[%s]))", metrics.LabelFault, sel(metrics.StoreFaultsTotal, jobMatcher), rate),
				"{{instance}} {{fault}}"))).
		WithPanel(graph("Spool files set aside",
			"Files the ClickHouse store's spool directory (or the embedded store's call log) holds for a person, by instance and kind, from any run until someone moves them out: rejected, batches of acknowledged calls that will not reach the store unless a person acts (McpAuditSpoolFilesSetAside after an hour); torn, tails cut off segments at start, expected after a crash. Flat at zero is healthy.",
			units.Short,
			query(fmt.Sprintf("max by (instance, %s) (%s)", metrics.LabelFile, sel(metrics.SpoolFilesSetAside, jobMatcher)),
				"{{instance}} {{file}}"))).
		WithPanel(graph("Acknowledged calls waiting for the store",
			"How full each instance's log of acknowledged calls not yet stored is, against its limit: the ClickHouse spool (it grows while ClickHouse is down or slow), or the embedded store's call log with ack log. At 100 % the collector refuses calls (503); past 50 % for 10m McpAuditSpoolFilling warns. Empty for the embedded store with ack commit, which has no log.",
			units.PercentUnit,
			query(fmt.Sprintf("max by (instance) (%s / %s)", sel(metrics.SpoolBytes, jobMatcher), sel(metrics.SpoolLimitBytes, jobMatcher)),
				"{{instance}}"))).
		WithPanel(graph("Store ready",
			"1 while each instance's store is ready (GET /readyz answers 200), 0 while it is not: ClickHouse unreachable or its spool still draining, the embedded store's call log not committed (ack log), or the embedded store's disk full. Calls are still acknowledged while the log above has room (on a full disk, those the store cannot write are refused 503); queries, the API and the page answer 503. Not ready for 5m, McpAuditStoreUnavailable warns; calls refused as store_unavailable for 5m, McpAuditStoreRefusingCalls pages.",
			units.Short,
			query(fmt.Sprintf("min by (instance) (%s)", sel(metrics.StoreReady, jobMatcher)), "{{instance}}"))).
		WithPanel(graph("Withdrawals waiting for the store",
			"Withdrawals of stored unverified_write findings (a call judged late settled the write) that the store refused as unavailable, per instance: retried at every commit and kept in the state file; the store, the API and the page show those findings open until it takes them. Above 0 for 30m, McpAuditWithdrawalsWaiting warns.",
			units.Short,
			query(fmt.Sprintf("max by (instance) (%s)", sel(metrics.WithdrawalsWaiting, jobMatcher)), "{{instance}}"))).
		WithPanel(graph("Ingest to finding latency",
			"Wall time to a finding's commit, by what it waited for: evidence, from the acknowledgement of the call that completed it (a call waits until its partition's watermark passes it: its slowest active source, less the lateness bound); window, from the end of its verification window in event time (fair where the sources' clocks are right).",
			units.Seconds,
			quantiles(metrics.FindingLatencySeconds, metrics.LabelWait, jobMatcher)...)).
		WithPanel(graph("Event time behind the wall clock",
			"How far behind the wall clock the event time judged so far (the watermark) is, per server, and how far its most lagging active and idle sources are: the active one holds its partitions back (mcpaudit status names it), a quiet source with a slow clock that still holds at its lag included. Traffic replayed from the past shows its age.",
			units.Seconds,
			query(fmt.Sprintf("max by (%s) (%s)", metrics.LabelServer, sel(metrics.PipelineWatermarkLagSeconds, serverMatcher)), "{{server}} watermark"),
			query(fmt.Sprintf("max by (%s, %s) (%s)", metrics.LabelServer, metrics.LabelState, sel(metrics.PipelineSourceLagSeconds, serverMatcher)), "{{server}} slowest {{state}} source"))).
		WithPanel(graph("Sources and waiting calls",
			"Sources (OTLP resources, call-record posters) by state, active ones holding their partitions' watermarks; and the calls waiting for a watermark.",
			units.Short,
			query(fmt.Sprintf("sum by (%s) (%s)", metrics.LabelState, sel(metrics.PipelineSources, jobMatcher)), "{{state}} sources"),
			query(fmt.Sprintf("sum(%s)", sel(metrics.PipelineBufferedCalls, jobMatcher)), "waiting calls"))).
		WithPanel(graph("Late, clock-ahead and clock-behind calls",
			"Calls per second that arrived behind their partition's watermark (judged late, or too late: stored, not judged), calls dated ahead of the collector's clock beyond the allowed skew, calls too late from a source whose clock is behind by more than detect.max_clock_lag (a slow clock, not a backlog; also among the too late), and id collisions: calls not judged because a different call came under their id (another exchange under the same trace and span id, stored; or another response to the same request at the same millisecond, not stored; the WARN lines kind=id_collision name them).",
			units.OpsPerSecond,
			query(fmt.Sprintf("sum by (%s, %s) (rate(%s[%s]))", metrics.LabelServer, metrics.LabelResult,
				sel(metrics.PipelineLateCallsTotal, serverMatcher), rate), "{{server}} late {{result}}"),
			query(fmt.Sprintf("sum by (%s) (rate(%s[%s]))", metrics.LabelServer,
				sel(metrics.PipelineClockAheadCallsTotal, serverMatcher), rate), "{{server}} clock ahead"),
			query(fmt.Sprintf("sum by (%s) (rate(%s[%s]))", metrics.LabelServer,
				sel(metrics.PipelineClockBehindCallsTotal, serverMatcher), rate), "{{server}} clock behind (too late)"),
			query(fmt.Sprintf("sum by (%s) (rate(%s[%s]))", metrics.LabelServer,
				sel(metrics.PipelineIDCollisionsTotal, serverMatcher), rate), "{{server}} id collisions"))).
		WithPanel(graph("Sources past detect.max_sources",
			"Calls per second of sources new to a partition that already held detect.max_sources sources, none quiet: stored and judged under its overflow source, whose clock follows the latest of them (a sender naming a new source per request, or more pods than the bound; WARN lines kind=source_overflow name the partition); and quiet sources forgotten per second to make room for new ones (churn of pods or posters, harmless).",
			units.OpsPerSecond,
			query(fmt.Sprintf("sum by (%s) (rate(%s[%s]))", metrics.LabelServer,
				sel(metrics.PipelineSourceOverflowCallsTotal, serverMatcher), rate), "{{server}} overflow calls"),
			query(fmt.Sprintf("sum by (%s) (rate(%s[%s]))", metrics.LabelServer,
				sel(metrics.PipelineSourcesDisplacedTotal, serverMatcher), rate), "{{server}} sources displaced"))).
		WithPanel(graph("Connections and bytes in flight",
			"Connections each listener holds, those refused per second at its cap (serve.connections.max_per_listener; a flood of held connections shows here), and the memory the ingest requests in flight hold against serve.receiver.max_in_flight_bytes (right axis, bytes).",
			units.Short,
			query(fmt.Sprintf("sum by (%s) (%s)", metrics.LabelListener, sel(metrics.ConnectionsOpen, jobMatcher)), "{{listener}} open"),
			query(fmt.Sprintf("sum by (%s) (rate(%s[%s]))", metrics.LabelListener, sel(metrics.ConnectionsRefusedTotal, jobMatcher), rate), "{{listener}} refused/s"),
			query(fmt.Sprintf("sum(%s)", sel(metrics.IngestBytesInFlight, jobMatcher)), "bytes in flight"))).
		WithPanel(graph("CPU",
			"CPU time used per second (1 is one full core).",
			units.PercentUnit,
			query(fmt.Sprintf("rate(process_cpu_seconds_total{%s}[%s])", jobMatcher, rate), "{{instance}}"))).
		WithPanel(graph("Memory",
			"Resident memory of the process and Go heap in use.",
			units.BytesIEC,
			query(fmt.Sprintf("process_resident_memory_bytes{%s}", jobMatcher), "{{instance}} resident"),
			query(fmt.Sprintf("go_memstats_heap_inuse_bytes{%s}", jobMatcher), "{{instance}} heap in use"))).
		WithPanel(graph("Goroutines and open files",
			"Goroutines and open file descriptors of the process.",
			units.Short,
			query(fmt.Sprintf("go_goroutines{%s}", jobMatcher), "{{instance}} goroutines"),
			query(fmt.Sprintf("process_open_fds{%s}", jobMatcher), "{{instance}} open fds"))).
		WithPanel(grid("Versions",
			"The version, commit and Go version of each running mcpaudit (mcpaudit_build_info; mcpaudit version prints the same).",
			units.Short,
			rows(fmt.Sprintf("max by (instance, %s, %s, %s) (%s)", metrics.LabelVersion, metrics.LabelRevision, metrics.LabelGoVersion,
				sel(metrics.BuildInfo, jobMatcher))))).
		WithPanel(graph("GC pause",
			"Average duration of a Go garbage-collection pause.",
			units.Seconds,
			query(fmt.Sprintf("rate(go_gc_duration_seconds_sum{%s}[%s])\n/\nrate(go_gc_duration_seconds_count{%s}[%s])",
				jobMatcher, rate, jobMatcher, rate), "{{instance}}"))).
		WithPanel(graph("Downtime before each start",
			"How long mcpaudit serve was down before its current start, per instance, by how the run before ended: stop (a clean stop), crash (killed, OOM-killed, crashed, host lost, or a commit failed at its stop; McpAuditServeCrashed warns for an hour), unknown. Set at each start and held until the next, so each step is a restart; the gap before it is the downtime. Calls sent meanwhile are missing unless their senders kept them (mcpaudit status lists the downtimes).",
			units.Seconds,
			query(fmt.Sprintf("max by (instance, %s) (%s)", metrics.LabelEnd, sel(metrics.ServeLastDowntimeSeconds, jobMatcher)),
				"{{instance}} {{end}}"))).
		WithPanel(grid("Restarts by how the run before ended",
			"For each instance and way a run ended (stop, crash, unknown), the latest start of mcpaudit serve after a run that ended so, among the last 100 downtimes its state file keeps: a crash stays here across later clean restarts.",
			units.DatetimeISO,
			rows(fmt.Sprintf("max by (instance, %s) (%s) * 1000", metrics.LabelEnd, sel(metrics.ServeRestartTimestampSeconds, jobMatcher)))))
}

// relays shows the capture relays (mcpaudit proxy and wrap): what they relay
// and record, and whether their records reach the collector. They export
// their own metrics under a job of their own (DefaultRelayJob).
func relays() *dashboard.DashboardBuilder {
	fwd := metrics.ProxyForwardRecordsTotal
	return newBoardOf(relayJobVar(), UIDRelays, "mcpaudit / capture relays",
		"mcpaudit proxy and mcpaudit wrap: requests relayed, tools/call exchanges recorded and not, and the call records on their way to the collector (disk buffer, sent, rejected, dropped).").
		WithPanel(single("Records dropped",
			"Call records the relays could not buffer over the dashboard's time range (buffer full or unwritable): calls relayed but never audited (McpAuditRelayDroppingRecords).",
			units.Short,
			instant(fmt.Sprintf(`sum(increase(%s[$__range]))`, sel(fwd, jobMatcher, metrics.LabelResult+`="`+metrics.ForwardDropped+`"`))))).
		WithPanel(single("Records on disk",
			"Bytes of call records the relays hold on disk for the collector now.",
			units.BytesIEC,
			instant(fmt.Sprintf("sum(%s)", sel(metrics.ProxyBufferBytes, jobMatcher))))).
		WithPanel(single("Calls in flight",
			"tools/call requests relayed and waiting for their response now.",
			units.Short,
			instant(fmt.Sprintf("sum(%s)", sel(metrics.ProxyInflightCalls, jobMatcher))))).
		WithPanel(single("Records rejected by the collector",
			"Call records the collector refused as malformed over the dashboard's time range; they are kept in the buffer's rejected/ directory.",
			units.Short,
			instant(fmt.Sprintf(`sum(increase(%s[$__range]))`, sel(fwd, jobMatcher, metrics.LabelResult+`="`+metrics.ForwardRejected+`"`))))).
		WithPanel(graph("Recorded calls by outcome",
			"tools/call exchanges recorded per second, by server and the outcome the collector will count.",
			units.OpsPerSecond,
			query(fmt.Sprintf("sum by (%s, %s) (rate(%s[%s]))", metrics.LabelServer, metrics.LabelOutcome,
				sel(metrics.ProxyRecordsTotal, jobMatcher), rate), "{{server}} {{outcome}}"))).
		WithPanel(graph("Records on the way to the collector",
			"Call records per second by what became of them: buffered on disk, sent (accepted by the collector), rejected, dropped; and the POSTs by result (retry: the collector was unreachable, overloaded or refused the credential).",
			units.OpsPerSecond,
			query(fmt.Sprintf("sum by (%s) (rate(%s[%s]))", metrics.LabelResult, sel(fwd, jobMatcher), rate), "records {{result}}"),
			query(fmt.Sprintf("sum by (%s) (rate(%s[%s]))", metrics.LabelResult, sel(metrics.ProxyForwardRequestsTotal, jobMatcher), rate), "posts {{result}}"))).
		WithPanel(graph("Disk buffer",
			"Bytes of call records on disk per relay. Growing while no record is sent: the collector is unreachable (McpAuditRelayNotDelivering).",
			units.BytesIEC,
			query(fmt.Sprintf("sum by (instance) (%s)", sel(metrics.ProxyBufferBytes, jobMatcher)), "{{instance}}"))).
		WithPanel(graph("Relayed requests",
			"HTTP requests the proxy relayed per second, by method and status class (error: the upstream gave no response).",
			units.RequestsPerSecond,
			query(fmt.Sprintf("sum by (%s, %s) (rate(%s[%s]))", metrics.LabelMethod, metrics.LabelStatus,
				sel(metrics.ProxyRequestsTotal, jobMatcher), rate), "{{method}} {{status}}"))).
		WithPanel(graph("Upstream latency",
			"Time from a request's arrival at the proxy to the upstream's response headers (for SSE, the start of the stream), by method.",
			units.Seconds,
			quantiles(metrics.ProxyUpstreamSeconds, metrics.LabelMethod, jobMatcher)...)).
		WithPanel(graph("Messages not recorded",
			"Messages relayed but not recorded, per second, by reason: oversized, invalid_json, unpaired (the 2024-11-05 HTTP+SSE transport, whose answers the proxy cannot tie to their calls).",
			units.OpsPerSecond,
			query(fmt.Sprintf("sum by (%s) (rate(%s[%s]))", metrics.LabelReason, sel(metrics.ProxyUnrecordedTotal, jobMatcher), rate), "{{reason}}")))
}
