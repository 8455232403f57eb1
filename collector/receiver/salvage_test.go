package receiver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
)

// breakSpanProto returns the protobuf request b with the span id of span
// sp (of the first scope of the first resource) cut to 3 bytes.
func breakSpanProto(t *testing.T, b []byte, sp int) []byte {
	t.Helper()
	return rewriteSpanProto(t, b, sp, func(span []byte) []byte {
		return rewriteField(t, span, 2, func(int, []byte) []byte { return []byte{1, 2, 3} })
	})
}

// rewriteSpanProto returns the protobuf request b with span sp (of the
// first scope of the first resource) replaced by fn of it.
func rewriteSpanProto(t *testing.T, b []byte, sp int, fn func([]byte) []byte) []byte {
	t.Helper()
	return rewriteField(t, b, 1, func(_ int, rs []byte) []byte {
		return rewriteField(t, rs, 2, func(_ int, ss []byte) []byte {
			return rewriteField(t, ss, 2, func(i int, span []byte) []byte {
				if i != sp {
					return span
				}
				return fn(bytes.Clone(span))
			})
		})
	})
}

// rewriteField returns msg with fn applied to the value of each field num
// that is a message, in order.
func rewriteField(t *testing.T, msg []byte, num protowire.Number, fn func(i int, v []byte) []byte) []byte {
	t.Helper()
	var out []byte
	i := 0
	for len(msg) > 0 {
		n, typ, tl := protowire.ConsumeTag(msg)
		if tl < 0 {
			t.Fatal("bad message")
		}
		fl := protowire.ConsumeFieldValue(n, typ, msg[tl:])
		if fl < 0 {
			t.Fatal("bad message")
		}
		if n == num && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(msg[tl:])
			out = protowire.AppendTag(out, n, typ)
			out = protowire.AppendBytes(out, fn(i, v))
			i++
		} else {
			out = append(out, msg[:tl+fl]...)
		}
		msg = msg[tl+fl:]
	}
	return out
}

// appendToSpanProto returns the protobuf request b with field num, of
// bytes v, appended to span sp (of the first scope of the first resource).
func appendToSpanProto(t *testing.T, b []byte, sp int, num protowire.Number, v []byte) []byte {
	t.Helper()
	return rewriteSpanProto(t, b, sp, func(span []byte) []byte {
		span = protowire.AppendTag(span, num, protowire.BytesType)
		return protowire.AppendBytes(span, v)
	})
}

// breakSpansJSON returns the JSON request b with span 1 given a span id of
// 2 hex digits and span 2 a start time that is an object.
func breakSpansJSON(t *testing.T, b []byte) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	spans := doc["resourceSpans"].([]any)[0].(map[string]any)["scopeSpans"].([]any)[0].(map[string]any)["spans"].([]any)
	spans[1].(map[string]any)["spanId"] = "ab"
	spans[2].(map[string]any)["startTimeUnixNano"] = map[string]any{"x": 1}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOTLP_BrokenSpanBesideGoodOnes: pdata refuses a whole request for one
// span it cannot decode (an id of the wrong length, a time that is not an
// integer). The receiver takes the spans beside it and names the broken
// ones in the partial success, over OTLP/HTTP (protobuf and JSON) and
// OTLP/gRPC, as it does for a span with a bad value (docs/security.md). A
// request whose broken part is not a span is still refused whole.
func TestOTLP_BrokenSpanBesideGoodOnes(t *testing.T) {
	e := newEnv(t, nil)
	ignored := func() float64 {
		t.Helper()
		n := 0.0
		for _, src := range []string{"otlp_http", "otlp_grpc"} {
			n += testutil.ToFloat64(counter(t, e.reg, "mcpaudit_ingest_records_total", map[string]string{"source": src, "result": "ignored"}))
		}
		return n
	}
	stored := func(server string) int {
		n := 0
		for _, c := range e.stored(t) {
			if c.Server == server {
				n++
			}
		}
		return n
	}
	check := func(t *testing.T, server string, resp ptraceotlp.ExportResponse, rejected int64, want ...string) {
		t.Helper()
		ps := resp.PartialSuccess()
		if ps.RejectedSpans() != rejected {
			t.Errorf("%d spans rejected (%q), want %d", ps.RejectedSpans(), ps.ErrorMessage(), rejected)
		}
		for _, w := range want {
			if !strings.Contains(ps.ErrorMessage(), w) {
				t.Errorf("partial success %q does not name %q", ps.ErrorMessage(), w)
			}
		}
		if n := stored(server); n != 4-int(rejected) {
			t.Errorf("%d calls of %s stored, want the %d good ones", n, server, 4-int(rejected))
		}
		if n := ignored(); n != 0 {
			t.Errorf("%v spans counted as ignored, want 0: a broken span is rejected, not ignored", n)
		}
	}

	t.Run("http_protobuf", func(t *testing.T) {
		b, _ := traces("salvage-proto", 4, nil).MarshalProto()
		check(t, "salvage-proto", e.exportProto(t, breakSpanProto(t, b, 1)), 1, "resourceSpans[0].scopeSpans[0].spans[1]: spanId: must be 8 bytes, not 3")
	})
	t.Run("http_json", func(t *testing.T) {
		b, _ := traces("salvage-json", 4, nil).MarshalJSON()
		a := e.post(t, "/v1/traces", "application/json", tokAcme, breakSpansJSON(t, b))
		if a.status != 200 {
			t.Fatalf("%d %s, want 200", a.status, a.body)
		}
		resp := ptraceotlp.NewExportResponse()
		if err := resp.UnmarshalJSON([]byte(a.body)); err != nil {
			t.Fatal(err)
		}
		check(t, "salvage-json", resp, 2, "resourceSpans[0].scopeSpans[0].spans[1]: spanId: must be hex digits",
			"resourceSpans[0].scopeSpans[0].spans[2]: startTimeUnixNano: must be an integer")
	})
	t.Run("grpc", func(t *testing.T) {
		cc := dialGRPC(t, e)
		b, _ := traces("salvage-grpc", 4, nil).MarshalProto()
		// The client marshals what it is given: a request built from the
		// broken bytes would not unmarshal, so they go raw.
		req, resp := rawMessage(breakSpanProto(t, b, 2)), rawMessage(nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokAcme)
		err := cc.Invoke(ctx, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", &req, &resp,
			grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		r := ptraceotlp.NewExportResponse()
		if err := r.UnmarshalProto(resp); err != nil {
			t.Fatal(err)
		}
		check(t, "salvage-grpc", r, 1, "resourceSpans[0].scopeSpans[0].spans[2]: spanId: must be 8 bytes, not 3")
	})
	// A fault the first pass does not look for (an event's time) is found
	// by decoding each span on its own; past maxProbed spans that is not
	// tried and the request is refused whole, as before.
	brokenEvent := func(t *testing.T, server string, n int) []byte {
		t.Helper()
		b, _ := traces(server, n, nil).MarshalJSON()
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		spans := doc["resourceSpans"].([]any)[0].(map[string]any)["scopeSpans"].([]any)[0].(map[string]any)["spans"].([]any)
		spans[1].(map[string]any)["events"] = []any{map[string]any{"timeUnixNano": map[string]any{"x": 1}}}
		out, _ := json.Marshal(doc)
		return out
	}
	t.Run("fault_found_by_decoding_each_span", func(t *testing.T) {
		a := e.post(t, "/v1/traces", "application/json", tokAcme, brokenEvent(t, "salvage-event", 4))
		if a.status != 200 {
			t.Fatalf("%d %s, want 200", a.status, a.body)
		}
		resp := ptraceotlp.NewExportResponse()
		if err := resp.UnmarshalJSON([]byte(a.body)); err != nil {
			t.Fatal(err)
		}
		check(t, "salvage-event", resp, 1, "resourceSpans[0].scopeSpans[0].spans[1]: cannot decode the span")
	})
	t.Run("too_many_spans_to_decode_each", func(t *testing.T) {
		// Protobuf, which has no size cap: an event whose time has the
		// wrong wire type, in span 1 of 10,001.
		b, _ := traces("salvage-many", 10_001, nil).MarshalProto()
		ev := protowire.AppendTag(nil, 1, protowire.BytesType)
		ev = protowire.AppendBytes(ev, []byte{1})
		a := e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, appendToSpanProto(t, b, 1, 11, ev))
		if a.status != 400 || stored("salvage-many") != 0 {
			t.Fatalf("%d %.200s, %d stored; want 400 and nothing stored", a.status, a.body, stored("salvage-many"))
		}
		b, _ = traces("salvage-few", 4, nil).MarshalProto()
		a = e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, appendToSpanProto(t, b, 1, 11, ev))
		if a.status != 200 || stored("salvage-few") != 3 {
			t.Fatalf("%d %.200s, %d stored; want the same fault in a request of 4 spans salvaged", a.status, a.body, stored("salvage-few"))
		}
	})
	t.Run("broken_resource_refused_whole", func(t *testing.T) {
		b, _ := traces("salvage-resource", 2, nil).MarshalJSON()
		bad := strings.Replace(string(b), `"resource":{`, `"resource":{"droppedAttributesCount":"many",`, 1)
		if bad == string(b) {
			t.Fatal("the request has no resource to break")
		}
		a := e.post(t, "/v1/traces", "application/json", tokAcme, []byte(bad))
		if a.status != 400 || stored("salvage-resource") != 0 {
			t.Fatalf("%d %s, %d stored; want 400 and nothing stored", a.status, a.body, stored("salvage-resource"))
		}
	})
}

// rawMessage is a gRPC message sent and received as its bytes.
type rawMessage []byte

// rawCodec sends a rawMessage as it is, under the name of the proto codec.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*rawMessage))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*rawMessage) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }
