package metrics

import (
	"slices"

	"github.com/mcpaudit/mcpaudit/audit"
)

// Metric names. The rules and dashboards packages build every query from
// these, so a rename fails to compile there.
const (
	// ToolCallsTotal counts tools/call exchanges by server, tool and outcome.
	ToolCallsTotal = "mcpaudit_tool_calls_total"
	// ToolCallDurationSeconds is the latency of tools/call exchanges that have one.
	ToolCallDurationSeconds = "mcpaudit_tool_call_duration_seconds"
	// CallFailuresTotal counts failed or uncertain calls and provider calls by
	// code and retry action.
	CallFailuresTotal = "mcpaudit_call_failures_total"
	// WritesTotal counts write attempts that reached a terminal state: a
	// write counts once for every terminal state it enters, so one that
	// moves from a terminal state to another (WritesRejudgedTotal) counts
	// in both.
	WritesTotal = "mcpaudit_writes_total"
	// WritesRejudgedTotal counts write attempts that moved from one
	// terminal state to another (LabelFrom, LabelTo): an unverified write a
	// call judged late proved durable or resolved, a durable write found
	// double-applied. WritesTotal{state} minus this {from=state} is the
	// writes whose latest state is state, each counted once, which is what
	// the SLI's recording rules count (rules.WritesLatestExpr).
	WritesRejudgedTotal = "mcpaudit_writes_rejudged_total"
	// WritesPending is the number of write attempts inside their verification window.
	WritesPending = "mcpaudit_writes_pending"
	// WriteVerificationSeconds is the event time from a pending write to the
	// proof that made it durable or resolved.
	WriteVerificationSeconds = "mcpaudit_write_verification_seconds"
	// FindingsTotal counts findings by server, kind and severity.
	FindingsTotal = "mcpaudit_findings_total"
	// FindingsWithdrawnTotal counts findings the collector took back by
	// server and kind (an unverified_write that a call judged late showed
	// wrong): FindingsTotal never goes down, and the findings there are
	// FindingsTotal minus this.
	FindingsWithdrawnTotal = "mcpaudit_findings_withdrawn_total"
	// IngestRecordsTotal counts received records (call records or spans) by
	// source and result. The results are disjoint: each record counts under
	// exactly one, so a sum over result is the number of records received.
	IngestRecordsTotal = "mcpaudit_ingest_records_total"
	// IngestRejectedTotal counts rejected records by source and reason.
	IngestRejectedTotal = "mcpaudit_ingest_rejected_total"
	// IngestWarningsTotal counts what kept call records held that was read
	// leniently (a name given twice, a member of the wrong type), by source
	// and reason (WarnReasons). A record may count under several reasons,
	// and it counts under IngestRecordsTotal as it was taken.
	IngestWarningsTotal = "mcpaudit_ingest_warnings_total"
	// StoreCommitSeconds is the latency of one commit to the embedded store.
	// The serve command observes it through ObserveStoreCommit; analyze does not.
	StoreCommitSeconds = "mcpaudit_store_commit_seconds"
	// FindingLatencySeconds is the wall time from when a finding could be
	// known to when it is committed (serve only), by what it waited for
	// (LabelWait): the acknowledgement of the call that completed its
	// evidence, or the end of its verification window (in event time, so
	// a fair measure where the sources' clocks are right).
	FindingLatencySeconds = "mcpaudit_finding_latency_seconds"
	// FindingLastEventTimestampSeconds is the event time (Unix seconds) of the
	// most recent finding of each server and kind. The immediate finding
	// alerts compare it with the wall clock, so that findings about the past
	// (an old capture loaded into the collector) do not page.
	FindingLastEventTimestampSeconds = "mcpaudit_finding_last_event_timestamp_seconds"
	// BuildInfo is 1, with the version, commit and Go version of the running
	// binary as labels.
	BuildInfo = "mcpaudit_build_info"
	// PipelineWatermarkLagSeconds is how far behind the wall clock the
	// event time judged so far is: the largest lag of the server's
	// partitions (serve only).
	PipelineWatermarkLagSeconds = "mcpaudit_pipeline_watermark_lag_seconds"
	// PipelineSourceLagSeconds is how far behind the wall clock the most
	// lagging source of a server is, by state: the most lagging active one
	// holds its partitions back; an idle one no longer does. A quiet
	// source still holding a partition at a slow clock's lag counts as
	// active, at that lag (sg22).
	PipelineSourceLagSeconds = "mcpaudit_pipeline_source_lag_seconds"
	// PipelineSources counts the sources (exporters, posters) by state:
	// active ones hold their partitions' watermarks (a quiet one holding
	// at a slow clock's lag included), idle ones no longer do.
	PipelineSources = "mcpaudit_pipeline_sources"
	// PipelineBufferedCalls counts calls waiting for their partition's
	// watermark.
	PipelineBufferedCalls = "mcpaudit_pipeline_buffered_calls"
	// PipelineLateCallsTotal counts calls that arrived behind their
	// partition's watermark, by what became of them (judged late, or too
	// late: beyond the allowed lateness, stored and not judged).
	PipelineLateCallsTotal = "mcpaudit_pipeline_late_calls_total"
	// PipelineClockAheadCallsTotal counts calls dated beyond the allowed
	// clock skew ahead of the collector's clock.
	PipelineClockAheadCallsTotal = "mcpaudit_pipeline_clock_ahead_calls_total"
	// PipelineClockBehindCallsTotal counts the calls too late to be judged
	// whose source never delivered a call dated within
	// detect.max_clock_lag of its arrival: a clock that slow, not a
	// backlog delivered late (also counted in PipelineLateCallsTotal).
	PipelineClockBehindCallsTotal = "mcpaudit_pipeline_clock_behind_calls_total"
	// PipelineIDCollisionsTotal counts calls dropped unjudged for sharing
	// their trace and span id with a different call (another session,
	// JSON-RPC id, tool, arguments or time), or their call id with one
	// that answered otherwise: an id collision, not a second observation
	// of one exchange.
	PipelineIDCollisionsTotal = "mcpaudit_pipeline_id_collisions_total"
	// PipelineSourceOverflowCallsTotal counts calls taken under their
	// partition's overflow source: their source was new to a partition
	// holding detect.max_sources sources, none of them quiet.
	PipelineSourceOverflowCallsTotal = "mcpaudit_pipeline_source_overflow_calls_total"
	// PipelineSourcesDisplacedTotal counts quiet sources forgotten to make
	// room for a new one in a partition holding detect.max_sources.
	PipelineSourcesDisplacedTotal = "mcpaudit_pipeline_sources_displaced_total"
	// ConnectionsOpen counts the connections each listener holds open.
	ConnectionsOpen = "mcpaudit_connections_open"
	// ConnectionsRefusedTotal counts the connections a listener refused at
	// its cap (serve.connections.max_per_listener).
	ConnectionsRefusedTotal = "mcpaudit_connections_refused_total"
	// IngestBytesInFlight is the memory held by the ingest requests being
	// read and processed, as counted against
	// serve.receiver.max_in_flight_bytes.
	IngestBytesInFlight = "mcpaudit_ingest_bytes_in_flight"
	// StoreFaultsTotal counts the faults of the store in use that lose
	// nothing by themselves yet need a person (LabelFault), since the store
	// was opened (serve only).
	StoreFaultsTotal = "mcpaudit_store_faults_total"
	// SpoolFilesSetAside is how many files the ClickHouse store's spool
	// directory holds, set aside for a person (LabelFile), read from the
	// directory at each scrape: from this run and earlier ones, until
	// someone moves them out (serve only).
	SpoolFilesSetAside = "mcpaudit_spool_files_set_aside"
	// SpoolBytes is the bytes of the acknowledged calls a store holds in
	// its local log and has not yet stored: the ClickHouse store's spool,
	// the embedded store's call log with ack "log" (serve only).
	SpoolBytes = "mcpaudit_spool_bytes"
	// SpoolLimitBytes is the limit of that log, past which appends are
	// refused (spool.max_bytes, sqlite.log_max_bytes).
	SpoolLimitBytes = "mcpaudit_spool_limit_bytes"
	// StoreReady is 1 while the store is ready and 0 while it is not, read
	// at each scrape from CheckReady, the check GET /readyz answers from
	// (serve only).
	StoreReady = "mcpaudit_store_ready"
	// ServeLastDowntimeSeconds is how long serve was down before this
	// start, labelled with how the run before it ended (LabelEnd): one
	// series, none when the downtime is unknown (serve only).
	ServeLastDowntimeSeconds = "mcpaudit_serve_last_downtime_seconds"
	// ServeRestartTimestampSeconds is, for each way a run of serve ended
	// (LabelEnd), the Unix time of the latest start after a run that
	// ended so, among the downtimes the state file keeps: a crash stays
	// in it across later restarts (serve only).
	ServeRestartTimestampSeconds = "mcpaudit_serve_restart_timestamp_seconds"
	// WithdrawalsWaiting counts the withdrawals of stored findings the
	// store refused as unavailable, retried at every commit and kept in
	// the state file meanwhile (serve only): the store shows their
	// findings open until it takes them.
	WithdrawalsWaiting = "mcpaudit_withdrawals_waiting"
)

// Label names.
const (
	LabelServer      = "server"
	LabelTool        = "tool"
	LabelOutcome     = "outcome"
	LabelCode        = "code"
	LabelRetryAction = "retry_action"
	LabelState       = "state"
	// LabelFrom and LabelTo are the states of WritesRejudgedTotal: the
	// terminal state a write left and the one it entered.
	LabelFrom     = "from"
	LabelTo       = "to"
	LabelKind     = "kind"
	LabelSeverity = "severity"
	LabelSource   = "source"
	LabelResult   = "result"
	LabelReason   = "reason"
	// LabelWait is what a finding waited for: evidence (the call that
	// completed it) or window (the end of its verification window).
	LabelWait      = "wait"
	LabelVersion   = "version"
	LabelRevision  = "revision"
	LabelGoVersion = "goversion"
	LabelListener  = "listener"
	// LabelFault is the fault of StoreFaultsTotal: one of Faults.
	LabelFault = "fault"
	// LabelFile is the kind of file of SpoolFilesSetAside: one of
	// SetAsideFiles.
	LabelFile = "file"
	// LabelEnd is how a run of serve ended, before a downtime: one of
	// Ends.
	LabelEnd = "end"
)

// Ends lists the values of LabelEnd: audit.Downtime.End, any other value
// (a state file edited by hand) counted as audit.EndUnknown.
var Ends = []string{audit.EndStop, audit.EndCrash, audit.EndUnknown}

// Values of LabelWait.
const (
	WaitEvidence = "evidence"
	WaitWindow   = "window"
)

// Values of LabelState for PipelineSources and of LabelResult for
// PipelineLateCallsTotal.
const (
	SourceActive = "active"
	SourceIdle   = "idle"
	LateJudged   = "judged"
	LateTooLate  = "too_late"
)

// Store faults, the values of LabelFault.
const (
	// FaultIDIndexWrite is a failed write of the embedded store's call id
	// index (pebble): the append still succeeded, lookups by id scan the
	// calls past the index until it catches up.
	FaultIDIndexWrite = "id_index_write"
	// FaultSpoolFileRejected is a ClickHouse spool file moved aside as
	// NNNN.rejected, damaged or refused by ClickHouse for good: its calls
	// were acknowledged and will not reach ClickHouse unless a person acts.
	FaultSpoolFileRejected = "spool_file_rejected"
	// FaultIDIndexCorrupt is a corrupt block met in the embedded store's
	// call id index (pebble): the read that met it fails and the lookup
	// scans the calls; the damage stays until a person deletes the index
	// (DATA_DIR/mcpaudit.db.ids) with serve stopped, and it is rebuilt.
	FaultIDIndexCorrupt = "id_index_corrupt"
	// FaultSpoolTailCut is a torn tail that recovery cut off the end of a
	// ClickHouse spool segment at Open, kept as NNNN.log.TIME.torn: writes
	// whose sync never returned (expected after a crash), or the last
	// frame, damaged after its sync (acknowledged calls).
	FaultSpoolTailCut = "spool_tail_cut"
)

// Faults lists every store fault.
var Faults = []string{FaultIDIndexWrite, FaultIDIndexCorrupt, FaultSpoolFileRejected, FaultSpoolTailCut}

// Files set aside in the ClickHouse spool directory, the values of
// LabelFile.
const (
	// FileRejected is a NNNN.rejected file: a batch of acknowledged calls,
	// damaged or refused by ClickHouse for good (FaultSpoolFileRejected).
	FileRejected = "rejected"
	// FileTorn is a NNNN.log.TIME.torn file: a tail cut off a segment
	// (FaultSpoolTailCut).
	FileTorn = "torn"
)

// SetAsideFiles lists every kind of file set aside.
var SetAsideFiles = []string{FileRejected, FileTorn}

// Other replaces a label value outside its bounded set: an unknown tool or
// code, a tool past the per-server cap, a server past the server cap, or a
// name that cannot be a label value.
const Other = "other"

// Source says where ingested records came from.
type Source string

// Listeners of serve, the values of LabelListener.
const (
	ListenerIngest = "ingest"
	ListenerGRPC   = "grpc"
	ListenerAPI    = "api"
)

// Ingest sources. Any other value is counted as Other.
const (
	SourceCallsHTTP Source = "calls_http" // call records POSTed over HTTP
	SourceOTLPHTTP  Source = "otlp_http"  // OTLP spans over HTTP
	SourceOTLPGRPC  Source = "otlp_grpc"  // OTLP spans over gRPC
	SourceFile      Source = "file"       // capture files read by analyze or replay
)

// Sources lists every ingest source.
var Sources = []Source{SourceCallsHTTP, SourceOTLPHTTP, SourceOTLPGRPC, SourceFile}

// RejectReason says why an ingested record was refused.
type RejectReason string

// Reject reasons. Any other value is counted as Other.
const (
	RejectInvalidJSON  RejectReason = "invalid_json"      // not JSON, or not the expected shape
	RejectMissingField RejectReason = "missing_field"     // a required field is absent
	RejectBadSpan      RejectReason = "bad_span"          // a span that is not an MCP tool call we can use
	RejectTooLarge     RejectReason = "too_large"         // over the size limit
	RejectQueueFull    RejectReason = "queue_full"        // back-pressure: the pipeline is full
	RejectDecodeError  RejectReason = "decode_error"      // protobuf or compression error
	RejectInvalidText  RejectReason = "invalid_text"      // a name or id that is not printable UTF-8
	RejectTooLong      RejectReason = "too_long"          // a name, id or payload over its cap, or too many attributes
	RejectTooDeep      RejectReason = "too_deep"          // JSON or OTLP values nested deeper than the limit
	RejectBadTime      RejectReason = "bad_time"          // a time the store cannot hold (outside 1678-2261), too far ahead, before retention's cutoff, or a bad duration
	RejectServerLimit  RejectReason = "server_limit"      // a new server past the tenant's cap of partitions
	RejectOverloaded   RejectReason = "overloaded"        // refused before reading: memory, bytes in flight or connections at their limit
	RejectTimeout      RejectReason = "timeout"           // the body did not arrive in time
	RejectTenantShare  RejectReason = "tenant_share"      // back-pressure: the tenant holds its share of the open calls
	RejectStoreDown    RejectReason = "store_unavailable" // the store refused the calls (an outage); retried by the sender
	RejectCanceled     RejectReason = "canceled"          // the sender gave up on its request (its timeout) before the calls were stored
)

// RejectReasons lists every reject reason.
var RejectReasons = []RejectReason{
	RejectInvalidJSON, RejectMissingField, RejectBadSpan, RejectTooLarge, RejectQueueFull, RejectDecodeError,
	RejectInvalidText, RejectTooLong, RejectTooDeep, RejectBadTime, RejectServerLimit, RejectOverloaded, RejectTimeout,
	RejectTenantShare, RejectStoreDown, RejectCanceled,
}

// WarnReasons lists every reason of IngestWarningsTotal: what a kept call
// record held (collector/capture's Warnings). Any other value is counted
// as Other.
var WarnReasons = []string{"duplicate_name", "wrong_type_id", "wrong_type_method", "wrong_type_arguments", "wrong_type_result", "wrong_type_is_error"}

// Ingest results. They are disjoint: a record counts under exactly one.
const (
	ResultAccepted  = "accepted"  // stored for the first time and handed to the detector
	ResultDuplicate = "duplicate" // an exchange already seen (same stable id): acknowledged, not stored again
	ResultRejected  = "rejected"  // refused; see IngestRejectedTotal for the reason
	ResultIgnored   = "ignored"   // well formed but not an MCP tools/call (another method, a non-MCP span)
)

// Results lists every ingest result.
var Results = []string{ResultAccepted, ResultDuplicate, ResultRejected, ResultIgnored}

// Buckets of the histograms.
var (
	// DurationBuckets are the buckets the MCP semantic conventions advise for
	// mcp.server.operation.duration and mcp.client.operation.duration.
	DurationBuckets = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}
	// VerificationBuckets span a write's verification window (5 minutes by
	// default) with room for longer configured windows.
	VerificationBuckets = []float64{0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	// StoreCommitBuckets cover a local embedded-store commit.
	StoreCommitBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	// FindingLatencyBuckets span a sub-millisecond detector to findings held
	// back by event time: the lateness bound and a new partition's hold
	// (seconds), an exporter's flush interval and the idle timeout (5 to
	// 10 s), a late call within the allowed lateness (2 min), and an active
	// source lagging past McpAuditSourceLagging's 5 min for as long as the
	// correlation window (1 h).
	FindingLatencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
)

// Family describes one metric family: docs/metrics.md, the rules and the
// dashboards tests check themselves against this list.
type Family struct {
	Name   string
	Type   string // counter, gauge or histogram
	Help   string
	Labels []string
}

// Families lists every metric this package exports.
var Families = []Family{
	{ToolCallsTotal, "counter", "MCP tools/call exchanges by outcome.",
		[]string{LabelServer, LabelTool, LabelOutcome}},
	{ToolCallDurationSeconds, "histogram", "Duration of MCP tools/call exchanges.",
		[]string{LabelServer, LabelTool}},
	{CallFailuresTotal, "counter", "Failed or uncertain calls and provider calls by error code and retry action.",
		[]string{LabelServer, LabelTool, LabelCode, LabelRetryAction}},
	{WritesTotal, "counter", "Write attempts that reached a terminal state.",
		[]string{LabelServer, LabelTool, LabelState}},
	{WritesRejudgedTotal, "counter", "Write attempts counted in mcpaudit_writes_total under one terminal state that moved to another (from, to): mcpaudit_writes_total{state=S} minus this {from=S} counts each write once, by its latest state.",
		[]string{LabelServer, LabelTool, LabelFrom, LabelTo}},
	{WritesPending, "gauge", "Write attempts inside their verification window.",
		[]string{LabelServer}},
	{WriteVerificationSeconds, "histogram", "Event time from a pending write to the proof that made it durable or resolved.",
		[]string{LabelServer}},
	{FindingsTotal, "counter", "Findings by kind and severity.",
		[]string{LabelServer, LabelKind, LabelSeverity}},
	{FindingsWithdrawnTotal, "counter", "Findings counted in mcpaudit_findings_total that the collector withdrew (a call judged late showed them wrong).",
		[]string{LabelServer, LabelKind, LabelSeverity}},
	{IngestRecordsTotal, "counter", "Ingested records (call records or spans) by source and result.",
		[]string{LabelSource, LabelResult}},
	{IngestRejectedTotal, "counter", "Rejected records by source and reason.",
		[]string{LabelSource, LabelReason}},
	{IngestWarningsTotal, "counter", "Members of kept call records read leniently (a name given twice, a member of the wrong type), by source and reason.",
		[]string{LabelSource, LabelReason}},
	{StoreCommitSeconds, "histogram", "Duration of commits to the embedded store.",
		nil},
	{FindingLatencySeconds, "histogram", "Wall time from the acknowledgement of the call that completed a finding's evidence, or from the end of its verification window, to its commit.",
		[]string{LabelWait}},
	{FindingLastEventTimestampSeconds, "gauge", "Event time of the most recent finding of each kind, in Unix seconds.",
		[]string{LabelServer, LabelKind}},
	{BuildInfo, "gauge", "1, labelled with the version, commit and Go version of the running mcpaudit.",
		[]string{LabelVersion, LabelRevision, LabelGoVersion}},
	{PipelineWatermarkLagSeconds, "gauge", "How far behind the wall clock the event time judged so far is, for the most lagging partition of the server.",
		[]string{LabelServer}},
	{PipelineSourceLagSeconds, "gauge", "How far behind the wall clock the most lagging source feeding the server is, by state (active sources hold its partitions back).",
		[]string{LabelServer, LabelState}},
	{PipelineSources, "gauge", "Sources (exporters, posters) by state: active ones hold their partitions' watermarks.",
		[]string{LabelState}},
	{PipelineBufferedCalls, "gauge", "Calls waiting for their partition's watermark.",
		nil},
	{PipelineLateCallsTotal, "counter", "Calls that arrived behind their partition's watermark, judged late or too late to judge.",
		[]string{LabelServer, LabelResult}},
	{PipelineClockAheadCallsTotal, "counter", "Calls dated beyond the allowed clock skew ahead of the collector's clock.",
		[]string{LabelServer}},
	{PipelineClockBehindCallsTotal, "counter", "Calls too late to be judged whose source never delivered a call dated within detect.max_clock_lag of its arrival (a clock that slow); also counted as too late.",
		[]string{LabelServer}},
	{PipelineSourceOverflowCallsTotal, "counter", "Calls of sources new to a partition that held detect.max_sources sources, none quiet: stored and judged under its overflow source, their senders' clocks not followed one by one.",
		[]string{LabelServer}},
	{PipelineSourcesDisplacedTotal, "counter", "Quiet sources forgotten to make room for a new one in a partition that held detect.max_sources sources.",
		[]string{LabelServer}},
	{PipelineIDCollisionsTotal, "counter", "Calls not judged because a different call came under the same trace and span id, or another response under the same call id (a broken exporter, or a replay tool rewriting ids).",
		[]string{LabelServer}},
	{ConnectionsOpen, "gauge", "Connections each listener holds open.",
		[]string{LabelListener}},
	{ConnectionsRefusedTotal, "counter", "Connections refused at the listener's cap (HTTP: answered 503).",
		[]string{LabelListener}},
	{IngestBytesInFlight, "gauge", "Memory held by the ingest requests being read and processed (four times their bytes), against serve.receiver.max_in_flight_bytes.",
		nil},
	{StoreFaultsTotal, "counter", "Faults of the store since it was opened: id_index_write (a failed write of the call id index; caught up later), id_index_corrupt (a corrupt block met in the call id index; delete it to rebuild), spool_file_rejected (a file of acknowledged calls in the ClickHouse spool or the embedded store's call log moved aside as .rejected), spool_tail_cut (a torn tail cut off a segment of that log at open, kept as .torn).",
		[]string{LabelFault}},
	{SpoolFilesSetAside, "gauge", "Files the ClickHouse spool directory (or the embedded store's call log) holds set aside for a person, from this run and earlier ones, until someone moves them out: rejected (NNNN.rejected, acknowledged calls that will not reach the store unless a person acts), torn (tails cut off segments at start, NNNN.log.TIME.torn).",
		[]string{LabelFile}},
	{SpoolBytes, "gauge", "Bytes of acknowledged calls held in the store's local log and not yet stored: the ClickHouse spool, or the embedded store's call log (ack log).",
		nil},
	{SpoolLimitBytes, "gauge", "The limit of the store's local log: past it, appends are refused (503) until the log drains.",
		nil},
	{StoreReady, "gauge", "1 while the store is ready (GET /readyz answers 200), 0 while it is not: ClickHouse unreachable or its spool draining, the embedded store's call log not committed (ack log), or the embedded store's disk full (until a write as large as the one refused succeeds or the disk has room).",
		nil},
	{ServeLastDowntimeSeconds, "gauge", "How long serve was down before this start, from the previous run's last save of its state file to this start, labelled with how that run ended: stop (a clean stop), crash (killed, crashed, or a commit that failed at its stop) or unknown.",
		[]string{LabelEnd}},
	{ServeRestartTimestampSeconds, "gauge", "Unix time of the latest start of serve after a run that ended so (stop, crash or unknown), among the last 100 downtimes its state file keeps.",
		[]string{LabelEnd}},
	{WithdrawalsWaiting, "gauge", "Withdrawals of stored unverified_write findings that the store refused as unavailable, retried at every commit: the store shows those findings open until it takes them.",
		nil},
}

// family returns the entry of Families named name; it panics on a typo, which
// the package tests catch.
func family(name string) Family {
	i := slices.IndexFunc(Families, func(f Family) bool { return f.Name == name })
	if i < 0 {
		panic("metrics: no family " + name)
	}
	return Families[i]
}

// SeriesNames returns every series name the exported families produce: the
// counter and gauge names, and each histogram's _bucket, _sum and _count.
func SeriesNames() []string {
	var names []string
	for _, f := range Families {
		if f.Type == "histogram" {
			names = append(names, f.Name+"_bucket", f.Name+"_sum", f.Name+"_count")
			continue
		}
		names = append(names, f.Name)
	}
	return names
}

// KnownCodes are the error codes and situations of findings.md §1 and the
// JSON-RPC error codes: the default set of code label values.
var KnownCodes = []string{
	// fix_input
	"E_ARGUMENT", "E_PATH", "E_REQUEST_ID", "E_CAS_REQUIRED", "E_REQUEST_REUSE", "E_UNKNOWN_TOOL",
	"E_TIME_NOT_RECORDED", "invalid_write_basis",
	// refresh_and_retry
	"STALE_READ", "STALE_CURSOR", "E_CURSOR",
	// reread_and_rebase
	"STALE_REVISION", "STORAGE_CONFLICT", "stale_live_revision",
	// replay_same_request
	"COMMIT_UNKNOWN",
	// verify_then_decide
	"E_STORAGE", "E_TIMEOUT", "in_flight_unknown",
	// wait_then_retry
	"E_CORE_UNAVAILABLE", "E_APP_NOT_RUNNING",
	// reauthorize
	"PROVIDER_AUTH_REQUIRED", "E_READ_ONLY",
	// split_work
	"E_CONTEXT_BUDGET", "E_TOO_MANY_DOCUMENTS", "document_size_limit",
	// escalate
	"E_INTEGRITY", "E_MIGRATION", "E_CORE", "E_INTERNAL", "journal_corrupt",
	// no response
	"timeout", "connection_reset", "canceled", "no_response",
	// JSON-RPC
	"-32700", "-32600", "-32601", "-32602", "-32603",
}

// DefaultKnownCode reports whether code is one of KnownCodes.
func DefaultKnownCode(code string) bool { return slices.Contains(KnownCodes, code) }

// outcomeLabel bounds an outcome to the four of audit.
func outcomeLabel(o audit.Outcome) string {
	switch o {
	case audit.OutcomeOK, audit.OutcomeToolError, audit.OutcomeProtocolError, audit.OutcomeNoResponse:
		return string(o)
	}
	return Other
}

// actionLabel bounds a retry action; an empty or unknown one is "unknown",
// as findings.md §1 counts unmatched failures.
func actionLabel(a audit.RetryAction) string {
	if slices.Contains(audit.RetryActions, a) {
		return string(a)
	}
	return string(audit.ActionUnknown)
}

// kindLabel bounds a finding kind.
func kindLabel(k audit.Kind) string {
	if slices.Contains(audit.Kinds, k) {
		return string(k)
	}
	return Other
}

// severityLabel returns the finding's severity, or its kind's when the
// finding carries none that is known.
func severityLabel(f *audit.Finding) string {
	if f.Severity.Rank() > 0 {
		return string(f.Severity)
	}
	if slices.Contains(audit.Kinds, f.Kind) {
		return string(f.Kind.Severity())
	}
	return string(audit.SeverityInfo)
}

// terminalStates are the states counted in WritesTotal.
var terminalStates = []audit.WriteState{
	audit.StateDurable, audit.StateResolved, audit.StateRejected, audit.StateUnverified, audit.StateDoubleApplied,
}

// Rejudgements lists the moves from one terminal state to another that the
// detector makes, whose WritesRejudgedTotal series start at zero with a
// tool's first write, so that the first of them already counts as an
// increase: a call judged late settles an unverified write (durable,
// resolved), and a late first application makes an accepted write
// double-applied. Any other move is counted too, its series made then.
var Rejudgements = [][2]audit.WriteState{
	{audit.StateUnverified, audit.StateDurable},
	{audit.StateUnverified, audit.StateResolved},
	{audit.StateUnverified, audit.StateDoubleApplied},
	{audit.StateDurable, audit.StateDoubleApplied},
	{audit.StateResolved, audit.StateDoubleApplied},
}

func sourceLabel(s Source) string {
	if slices.Contains(Sources, s) {
		return string(s)
	}
	return Other
}

func warnLabel(r string) string {
	if slices.Contains(WarnReasons, r) {
		return r
	}
	return Other
}

func reasonLabel(r RejectReason) string {
	if slices.Contains(RejectReasons, r) {
		return string(r)
	}
	return Other
}
