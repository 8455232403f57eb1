package receiver_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestOTLP_EndBeforeStart: a span that ends before it starts has no
// duration to take (a call record's negative duration_ms is refused): it
// is rejected alone as a bad time, named by its path and why in the
// partial success, counted under bad_time and logged as a rejected_span;
// the spans beside it are stored. Over OTLP/HTTP protobuf, OTLP/HTTP JSON
// and OTLP/gRPC. A span without an end time (0) is taken, its duration
// unknown.
func TestOTLP_EndBeforeStart(t *testing.T) {
	endBefore := func(sp ptrace.Span) {
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(-1500 * time.Millisecond)))
	}
	const want = "resourceSpans[0].scopeSpans[0].spans[0]: field end_time_unix_nano: the span ends 1.5s before it starts (start_time_unix_nano)"
	for _, carrier := range []string{"protobuf", "json", "grpc"} {
		t.Run(carrier, func(t *testing.T) {
			e := newEnv(t, nil)
			req := traces("thegram", 3, endBefore)
			resp, src := e.exportBy(t, carrier, req)
			ps := resp.PartialSuccess()
			if ps.RejectedSpans() != 1 || ps.ErrorMessage() != want {
				t.Errorf("partial success %d %q, want 1 %q", ps.RejectedSpans(), ps.ErrorMessage(), want)
			}
			if n := len(e.stored(t)); n != 2 {
				t.Errorf("%d calls stored, want the 2 other spans", n)
			}
			if n := e.rejectedCount(t, metrics.RejectBadTime, src); n != 1 {
				t.Errorf("%v spans counted as bad_time, want 1", n)
			}
			ls := e.logs.lines(t, "rejected_span")
			if len(ls) != 1 || ls[0]["reason"] != string(metrics.RejectBadTime) || !strings.HasPrefix(want, ls[0]["error"].(string)) {
				t.Errorf("rejected_span lines %v, want one of reason bad_time naming the span", ls)
			}
		})
	}
	// An end past what a time holds (2262 and after: above 2^63-1 ns,
	// which pdata turns into a time before 1970) has no duration either:
	// before, the call was stored with a negative one.
	t.Run("end_past_2262", func(t *testing.T) {
		for _, end := range []uint64{1<<63 + 5, math.MaxUint64} {
			e := newEnv(t, nil)
			req := traces("thegram", 3, func(sp ptrace.Span) { sp.SetEndTimestamp(pcommon.Timestamp(end)) })
			const want = "resourceSpans[0].scopeSpans[0].spans[0]: field end_time_unix_nano: "
			for _, carrier := range []string{"protobuf", "json", "grpc"} {
				resp, _ := e.exportBy(t, carrier, req)
				ps := resp.PartialSuccess()
				if ps.RejectedSpans() != 1 || !strings.HasPrefix(ps.ErrorMessage(), want) || !strings.Contains(ps.ErrorMessage(), "outside 1678-2261") {
					t.Errorf("end %d over %s: partial success %d %q, want 1 %q... outside 1678-2261", end, carrier, ps.RejectedSpans(), ps.ErrorMessage(), want)
				}
			}
			for _, c := range e.stored(t) {
				if c.Duration < 0 {
					t.Errorf("end %d: call %s stored with a duration of %s", end, c.RPCID, c.Duration)
				}
			}
		}
	})
	t.Run("no_end_time", func(t *testing.T) {
		e := newEnv(t, nil)
		a, resp := e.postTraces(t, traces("thegram", 3, func(sp ptrace.Span) { sp.SetEndTimestamp(0) }), false)
		if a.status != 200 || resp.PartialSuccess().RejectedSpans() != 0 {
			t.Fatalf("%d %q %q, want 200 with nothing rejected", a.status, a.body, resp.PartialSuccess().ErrorMessage())
		}
		if n := len(e.stored(t)); n != 3 {
			t.Errorf("%d calls stored, want 3", n)
		}
	})
}
