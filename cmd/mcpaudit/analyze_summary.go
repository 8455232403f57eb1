package main

import (
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/internal/conf"
)

// analyzeSummary is the summary of an analyze run as --summary json prints
// it: one JSON object on one line, after the findings. docs/api.md
// documents its fields; SummaryVersion changes when one is renamed,
// removed or retyped.
type analyzeSummary struct {
	SummaryVersion int `json:"summary_version"`
	// Calls are the distinct tools/call exchanges analyzed.
	Calls int64 `json:"calls"`
	// Duplicates are second observations of an exchange, dropped.
	Duplicates int64 `json:"duplicates"`
	// IDCollisions are the duplicates that were another exchange under
	// the trace and span id of one taken, or another response under its
	// call id (detect.Stats.Collisions): dropped, never judged.
	IDCollisions int64 `json:"id_collisions"`
	// Late are calls that arrived later than the lateness bound.
	Late int64 `json:"late"`
	// TooLate are calls later than detect.allowed_lateness behind the
	// input's time: counted, never judged.
	TooLate int64 `json:"too_late"`
	// Outcomes counts calls by outcome, every outcome present.
	Outcomes map[audit.Outcome]int64 `json:"outcomes"`
	// Writes counts write attempts by current state, every state present.
	Writes map[audit.WriteState]int64 `json:"writes"`
	// Failures counts failures by retry action, then by code.
	Failures map[audit.RetryAction]map[string]int64 `json:"failures"`
	// SLI is the write-durability SLI, null when no write counts toward it.
	SLI *float64 `json:"sli"`
	// Findings counts findings by kind, every kind present.
	Findings map[audit.Kind]int64 `json:"findings"`
	// FindingsBySeverity counts findings by severity, every severity present.
	FindingsBySeverity map[audit.Severity]int64 `json:"findings_by_severity"`
	// Failing counts the findings at or above --fail-on: the run exits 1
	// when it is above 0.
	Failing int `json:"failing"`
	// Ignored counts records and spans of methods other than tools/call.
	Ignored int `json:"ignored"`
	// Rejected counts unusable records and spans; RejectedExamples holds the
	// first of them with their file, line and reason.
	Rejected         int      `json:"rejected"`
	RejectedExamples []string `json:"rejected_examples"`
	// Warned counts the warnings about records kept but read leniently (a
	// name given twice, a member of the wrong type); WarningExamples holds
	// the first of each kind for each field of each input. Both are left
	// out when there is none.
	Warned          int      `json:"warned,omitempty"`
	WarningExamples []string `json:"warning_examples,omitempty"`
}

func newSummary(det *analyzer, rejects *rejectLog, col *collector) analyzeSummary {
	s := det.eng.Stats()
	out := analyzeSummary{
		SummaryVersion: 1,
		Calls:          s.Calls, Duplicates: s.Duplicates, IDCollisions: s.Collisions, Late: s.Late, TooLate: s.TooLate,
		Outcomes:           map[audit.Outcome]int64{},
		Writes:             map[audit.WriteState]int64{},
		Failures:           map[audit.RetryAction]map[string]int64{},
		Findings:           map[audit.Kind]int64{},
		FindingsBySeverity: map[audit.Severity]int64{audit.SeverityCritical: 0, audit.SeverityWarning: 0, audit.SeverityInfo: 0},
		Failing:            col.failing,
		Ignored:            rejects.ignored,
		Rejected:           rejects.n,
		RejectedExamples:   append([]string{}, rejects.shown...),
		Warned:             rejects.nWarns,
		WarningExamples:    rejects.warnShown,
	}
	for _, o := range []audit.Outcome{audit.OutcomeOK, audit.OutcomeToolError, audit.OutcomeProtocolError, audit.OutcomeNoResponse} {
		out.Outcomes[o] = s.Outcomes[o]
	}
	for _, st := range audit.WriteStates {
		out.Writes[st] = s.Writes[st]
	}
	for a, codes := range s.Failures {
		if len(codes) == 0 {
			continue
		}
		m := map[string]int64{}
		for c, n := range codes {
			m[c] = n
		}
		out.Failures[a] = m
	}
	for _, k := range audit.Kinds {
		out.Findings[k] = s.Findings[k]
	}
	for i := range col.findings {
		out.FindingsBySeverity[col.findings[i].Severity]++
	}
	if v, ok := audit.SLI(s.Writes); ok {
		out.SLI = &v
	}
	return out
}

// rejectReason says why a record or span of a file was rejected, in the
// reasons of mcpaudit_ingest_rejected_total: the Kind its error was given
// where it was rejected (capture.RejectKind, as serve counts it), never its
// wording (which is for display).
func rejectReason(err error) metrics.RejectReason {
	if k := capture.RejectKind(err); k != "" {
		return metrics.RejectReason(k)
	}
	return metrics.RejectInvalidJSON
}

// ingest counts what the files held as the receivers count a request, with
// source="file": calls taken, duplicates dropped, records rejected by
// reason and records of other methods ignored.
func (w *metricsWriter) ingest(det *analyzer, rejects *rejectLog) {
	w.sink.IngestAccepted(metrics.SourceFile, int(det.eng.Stats().Calls))
	w.sink.IngestDuplicate(metrics.SourceFile, int(det.eng.Stats().Duplicates))
	w.sink.IngestIgnored(metrics.SourceFile, rejects.ignored)
	for r, n := range rejects.reasons {
		w.sink.IngestRejected(metrics.SourceFile, r, n)
	}
	for r, n := range rejects.warns {
		w.sink.IngestWarned(metrics.SourceFile, r, n)
	}
}

// durationFlag is a flag of one duration syntax with the configuration:
// "30s", "5m", "1d", "1d12h".
type durationFlag time.Duration

func (d *durationFlag) String() string { return conf.FormatDuration(time.Duration(*d)) }

func (d *durationFlag) Set(s string) error {
	v, err := conf.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = durationFlag(v)
	return nil
}
