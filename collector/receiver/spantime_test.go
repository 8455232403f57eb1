package receiver_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestOTLPProto_SpanTimeFaultsAreBadTime: over OTLP protobuf, a span whose
// start time field has another wire type than fixed64 (which pdata cannot
// decode), whose end time has one, or whose start is 0, is rejected and
// counted bad_time, as a call record whose time cannot be read is, and as
// analyze counts the same span of OTLP JSON (TestRejectKinds_ServeAsAnalyze
// in cmd/mcpaudit); the spans beside them are taken. They counted as
// bad_span.
func TestOTLPProto_SpanTimeFaultsAreBadTime(t *testing.T) {
	e := newEnv(t, nil)
	// Span 0 starts at 0.
	b, _ := traces("spantime", 5, func(sp ptrace.Span) { sp.SetStartTimestamp(0) }).MarshalProto()
	// replace returns span with its time field num as a varint.
	replace := func(num protowire.Number) func([]byte) []byte {
		return func(span []byte) []byte {
			var out []byte
			for len(span) > 0 {
				n, typ, tl := protowire.ConsumeTag(span)
				fl := protowire.ConsumeFieldValue(n, typ, span[tl:])
				if tl < 0 || fl < 0 {
					t.Fatal("bad span")
				}
				if n == num {
					out = protowire.AppendTag(out, n, protowire.VarintType)
					out = protowire.AppendVarint(out, 5)
				} else {
					out = append(out, span[:tl+fl]...)
				}
				span = span[tl+fl:]
			}
			return out
		}
	}
	bad := rewriteSpanProto(t, b, 1, replace(7))
	bad = rewriteSpanProto(t, bad, 2, replace(8))
	resp := e.exportProto(t, bad)
	msg := resp.PartialSuccess().ErrorMessage()
	for _, w := range []string{
		"resourceSpans[0].scopeSpans[0].spans[1]: startTimeUnixNano: must be fixed64 (wire type 1), not wire type 0",
		"resourceSpans[0].scopeSpans[0].spans[2]: endTimeUnixNano: must be fixed64 (wire type 1), not wire type 0",
		"resourceSpans[0].scopeSpans[0].spans[0]: span without start time",
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("partial success %q lacks %q", msg, w)
		}
	}
	n := 0
	for _, c := range e.stored(t) {
		if c.Server == "spantime" {
			n++
		}
	}
	if r := resp.PartialSuccess().RejectedSpans(); r != 3 || n != 2 {
		t.Errorf("%d spans rejected, %d stored; want 3 and the 2 good ones", r, n)
	}
	if got := e.rejectedCount(t, metrics.RejectBadTime, metrics.SourceOTLPHTTP); got != 3 {
		t.Errorf("bad_time counted %v, want 3", got)
	}
	if got := testutil.ToFloat64(counter(t, e.reg, metrics.IngestRejectedTotal, map[string]string{"source": string(metrics.SourceOTLPHTTP), "reason": string(metrics.RejectBadSpan)})); got != 0 {
		t.Errorf("bad_span counted %v, want 0", got)
	}
}
