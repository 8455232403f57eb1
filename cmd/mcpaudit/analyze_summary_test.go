package main

import (
	"fmt"
	"testing"

	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestRejectReason: a rejected record or span is counted under the Kind
// set where it was rejected, never by its words: reworded reasons count
// as before, and the old words without a Kind count as nothing special.
func TestRejectReason(t *testing.T) {
	f := func(err error, want metrics.RejectReason) {
		t.Helper()
		if got := rejectReason(err); got != want {
			t.Errorf("rejectReason(%v) = %s, want %s", err, got, want)
		}
	}
	rec := func(field, reason, kind string) error {
		return &capture.RecordError{Source: "in", Line: 3, Field: field, Reason: reason, Kind: kind}
	}
	span := func(reason, kind string) error {
		return &capture.SpanError{Source: "in", RejectedSpan: otlp.RejectedSpan{Path: "resourceSpans[0].scopeSpans[0].spans[1]", Reason: reason, Kind: kind}}
	}
	// Records: the words capture writes today, then others.
	f(rec("time", "missing", string(metrics.RejectMissingField)), metrics.RejectMissingField)
	f(rec("time", "absent", string(metrics.RejectMissingField)), metrics.RejectMissingField)
	f(rec("", "line longer than 1048576 bytes", string(metrics.RejectTooLarge)), metrics.RejectTooLarge)
	f(rec("", "the line passes 1 MiB", string(metrics.RejectTooLarge)), metrics.RejectTooLarge)
	f(rec("", "not JSON: invalid escape \\x at byte offset 9", ""), metrics.RejectInvalidJSON)
	f(rec("server", "missing", ""), metrics.RejectInvalidJSON)
	f(rec("", "line longer than 1048576 bytes", ""), metrics.RejectInvalidJSON)
	// Spans: bad_span unless their Kind says otherwise.
	f(span("no gen_ai.tool.name", ""), metrics.RejectBadSpan)
	f(span("an attribute value nests more than 32 arrays or key-value lists", string(metrics.RejectTooDeep)), metrics.RejectTooDeep)
	f(span("nested too deep", string(metrics.RejectTooDeep)), metrics.RejectTooDeep)
	f(span("longer than 1048576 bytes", string(metrics.RejectTooLong)), metrics.RejectTooLong)
	// Wrapped, as a reader may hand them on.
	f(fmt.Errorf("cannot read in: %w", rec("request", "missing", string(metrics.RejectMissingField))), metrics.RejectMissingField)
	f(fmt.Errorf("cannot read in: %w", span("x", string(metrics.RejectTooDeep))), metrics.RejectTooDeep)
	f(fmt.Errorf("something else"), metrics.RejectInvalidJSON)
}
