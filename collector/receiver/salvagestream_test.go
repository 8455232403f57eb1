package receiver_test

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// largeTracesJSON returns an OTLP JSON request of n read spans of server,
// each under ids of its own, with fn applied to its spans as decoded
// JSON; it fails t unless the request is over 4 MiB, the most the
// salvage parses into one tree.
func largeTracesJSON(t *testing.T, server string, n int, fn func(spans []any)) []byte {
	t.Helper()
	req := traces(server, n, nil)
	spans := req.Traces().ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	for i := range spans.Len() {
		var tid [16]byte
		var sid [8]byte
		binary.BigEndian.PutUint64(tid[8:], uint64(i)+1)
		binary.BigEndian.PutUint64(sid[:], uint64(i)+1)
		spans.At(i).SetTraceID(pcommon.TraceID(tid))
		spans.At(i).SetSpanID(pcommon.SpanID(sid))
	}
	b, err := req.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	fn(doc["resourceSpans"].([]any)[0].(map[string]any)["scopeSpans"].([]any)[0].(map[string]any)["spans"].([]any))
	if b, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if len(b) <= 4<<20 {
		t.Fatalf("the request has %d bytes, not more than 4 MiB", len(b))
	}
	return b
}

// TestOTLP_LargeJSONBrokenSpanBesideGoodOnes: an OTLP JSON body over 4 MiB
// with a span pdata cannot decode is salvaged span by span, as a smaller
// one is (TestOTLP_BrokenSpanBesideGoodOnes): the good spans are stored and
// the broken ones named. Found by adv48: one span with a time that is not
// an integer among 10,000 had the whole request refused 400, which an
// OTLP exporter does not retry, the message naming no span.
func TestOTLP_LargeJSONBrokenSpanBesideGoodOnes(t *testing.T) {
	e := newEnv(t, nil)
	stored := func(server string) int {
		n := 0
		for _, c := range e.stored(t) {
			if c.Server == server {
				n++
			}
		}
		return n
	}
	post := func(t *testing.T, b []byte) (answer, ptraceotlp.ExportPartialSuccess) {
		t.Helper()
		a := e.post(t, "/v1/traces", "application/json", tokAcme, b)
		if a.status != 200 {
			t.Fatalf("%d %.300s, want 200 with the broken spans named", a.status, a.body)
		}
		resp := ptraceotlp.NewExportResponse()
		if err := resp.UnmarshalJSON([]byte(a.body)); err != nil {
			t.Fatal(err)
		}
		return a, resp.PartialSuccess()
	}
	t.Run("bad_id_and_time", func(t *testing.T) {
		b := largeTracesJSON(t, "large-salvage", 10_000, func(spans []any) {
			spans[5_000].(map[string]any)["spanId"] = "ab"
			spans[9_999].(map[string]any)["startTimeUnixNano"] = map[string]any{"x": 1}
		})
		_, ps := post(t, b)
		for _, w := range []string{"resourceSpans[0].scopeSpans[0].spans[5000]: spanId: must be hex digits",
			"resourceSpans[0].scopeSpans[0].spans[9999]: startTimeUnixNano: must be an integer"} {
			if !strings.Contains(ps.ErrorMessage(), w) {
				t.Errorf("partial success %q does not name %q", ps.ErrorMessage(), w)
			}
		}
		if ps.RejectedSpans() != 2 || stored("large-salvage") != 9_998 {
			t.Fatalf("%d spans rejected, %d stored; want 2 and the 9,998 good ones", ps.RejectedSpans(), stored("large-salvage"))
		}
	})
	t.Run("fault_found_by_decoding_each_span", func(t *testing.T) {
		// An event's time, which only pdata's decoding of the span finds.
		b := largeTracesJSON(t, "large-salvage-event", 10_000, func(spans []any) {
			spans[1].(map[string]any)["events"] = []any{map[string]any{"timeUnixNano": map[string]any{"x": 1}}}
		})
		_, ps := post(t, b)
		if !strings.Contains(ps.ErrorMessage(), "resourceSpans[0].scopeSpans[0].spans[1]: cannot decode the span") ||
			ps.RejectedSpans() != 1 || stored("large-salvage-event") != 9_999 {
			t.Fatalf("%d rejected (%q), %d stored; want span 1 named and the 9,999 others stored",
				ps.RejectedSpans(), ps.ErrorMessage(), stored("large-salvage-event"))
		}
	})
	t.Run("broken_resource_refused_whole", func(t *testing.T) {
		b := largeTracesJSON(t, "large-salvage-resource", 10_000, func(spans []any) {
			spans[3].(map[string]any)["spanId"] = "ab"
		})
		bad := strings.Replace(string(b), `"resource":{`, `"resource":{"droppedAttributesCount":"many",`, 1)
		if bad == string(b) {
			t.Fatal("the request has no resource to break")
		}
		a := e.post(t, "/v1/traces", "application/json", tokAcme, []byte(bad))
		if a.status != 400 || stored("large-salvage-resource") != 0 {
			t.Fatalf("%d %.200s, %d stored; want 400 and nothing stored", a.status, a.body, stored("large-salvage-resource"))
		}
	})
}
