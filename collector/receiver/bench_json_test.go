package receiver_test

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// BenchmarkTracesJSON measures the receiver's CPU and allocations per call
// for POST /v1/traces of OTLP JSON requests of 512 spans: the body's
// depth and end check (one pass), pdata's decoding, reading the spans,
// checks, masking, grouping. The pipeline and the store are left out
// (countIngester).
//
//	go test ./collector/receiver -run '^$' -bench TracesJSON -benchmem
func BenchmarkTracesJSON(b *testing.B) {
	rc, in := benchReceiver(b)
	benchPost(b, rc, in, "/v1/traces", "application/json", benchBodies(b, ptraceotlp.ExportRequest.MarshalJSON))
}

// BenchmarkTracesJSONDeepSpan is BenchmarkTracesJSON with span 0 of each
// request holding a value nested 200 deep: the cost of rejecting that
// span alone (the body scanned again, following its keys, and copied
// without the span) on top of reading the 511 others.
//
//	go test ./collector/receiver -run '^$' -bench TracesJSONDeepSpan -benchmem
func BenchmarkTracesJSONDeepSpan(b *testing.B) {
	rc, in := benchReceiver(b)
	benchPost(b, rc, in, "/v1/traces", "application/json", benchBodies(b, func(req ptraceotlp.ExportRequest) ([]byte, error) {
		nestSlice(req.Traces().ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes(), "deep", 200)
		return req.MarshalJSON()
	}))
}
