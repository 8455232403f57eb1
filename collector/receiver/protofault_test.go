package receiver_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
)

// TestOTLPProto_FaultAtBodyOffset: an OTLP/HTTP protobuf body whose
// framing breaks is refused with where, as byte offsets in the body, as a
// JSON body is (TestOTLPJSON_FaultAtBodyOffset). A body cut short says so,
// where it ends and inside which field; a length inside the request that
// runs past its message says that message's end. Found from outside: the
// answer was pdata's "unexpected EOF" alone, wherever the body broke.
func TestOTLPProto_FaultAtBodyOffset(t *testing.T) {
	e := newEnv(t, nil)
	pb, err := traces("thegram", 3, nil).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	// The request is one resource_spans (field 1: 0x0a, a 2-byte length,
	// at byte offset 0) whose scope_spans (field 2: 0x12, a 2-byte
	// length) starts at byte offset 3.
	if pb[0] != 0x0a || pb[3] != 0x12 || len(pb) < 300 {
		t.Fatalf("the request's encoding changed: % x", pb[:6])
	}
	long := append([]byte{}, pb...)
	long[4], long[5] = 0xff, 0x04 // 639 bytes, more than resource_spans holds
	f := func(name string, body []byte, want ...string) {
		t.Run(name, func(t *testing.T) {
			a := e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, body)
			if a.status != 400 {
				t.Fatalf("%d %s, want 400", a.status, a.body)
			}
			for _, w := range append([]string{"cannot decode OTLP protobuf: unexpected EOF: "}, want...) {
				if !strings.Contains(a.body, w) {
					t.Errorf("answer %q lacks %q", a.body, w)
				}
			}
		})
	}
	f("cut_in_a_length", pb[:2], "the body is cut short at byte offset 2, inside the length of field 1 at byte offset 0")
	f("cut_in_a_span", pb[:300], "the body is cut short at byte offset 300, inside field 1 at byte offset 0 (616 bytes long, 297 left)")
	f("cut_before_the_end", pb[:len(pb)-1], "the body is cut short at byte offset 618, inside field 1 at byte offset 0")
	f("length_past_its_message", long, "field 2 at byte offset 3 (639 bytes long, 613 left) runs past the end of the message that holds it, at byte offset 619")
	if n := len(e.stored(t)); n != 0 {
		t.Errorf("%d calls stored from refused requests", n)
	}
	// A good body still goes in.
	if a := e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, pb); a.status != 200 {
		t.Fatalf("good body: %d %s", a.status, a.body)
	}
}

// TestOTLPProto_InvalidWireType: a tag of wire type 7 (no such type)
// inside a span is named, in the span's rejection, with what is wrong, its
// byte offset in the body and the field holding it, over OTLP/HTTP and
// OTLP/gRPC; the spans beside it are taken. pdata says "unexpected EOF"
// when the tag ends its message, and the answer said only that. Inside a
// resource, where no span is to blame, the request is refused whole with
// the same words.
func TestOTLPProto_InvalidWireType(t *testing.T) {
	e := newEnv(t, nil)
	tag := protowire.AppendTag(nil, 20, 7) // 0xa7 0x01
	// at returns the byte offset of the first tag of wire type 7 in b.
	at := func(b []byte) int {
		t.Helper()
		i := bytes.Index(b, tag)
		if i < 0 || bytes.Index(b[i+1:], tag) >= 0 {
			t.Fatalf("the tag is in the body %d times, want once", bytes.Count(b, tag))
		}
		return i
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
	t.Run("span_http", func(t *testing.T) {
		b, _ := traces("wiretype-http", 4, nil).MarshalProto()
		// At the end of span 1, and in an attribute of span 2.
		bad := rewriteSpanProto(t, b, 1, func(span []byte) []byte { return append(span, tag...) })
		bad = rewriteSpanProto(t, bad, 2, func(span []byte) []byte {
			return rewriteField(t, span, 9, func(i int, kv []byte) []byte {
				if i == 0 {
					kv = append(slices.Clip(kv), protowire.AppendTag(nil, 5, 7)...)
				}
				return kv
			})
		})
		first := at(bad)
		// Span 2's first attribute (its tag's offset), and the tag of
		// wire type 7 at its end.
		rs, _, _ := fieldAt(t, bad, 0, 1, 0)
		ss, _, _ := fieldAt(t, bad, rs, 2, 0)
		sp, _, _ := fieldAt(t, bad, ss, 2, 2)
		_, attr, end := fieldAt(t, bad, sp, 9, 0)
		second := end - 1 // the tag, one byte (0x2f), ends the attribute
		resp := e.exportProto(t, bad)
		msg := resp.PartialSuccess().ErrorMessage()
		for _, w := range []string{
			fmt.Sprintf("resourceSpans[0].scopeSpans[0].spans[1]: cannot decode the span: unexpected EOF: invalid wire type 7 at byte offset %d of the body, in the tag of field 20, inside the span", first),
			fmt.Sprintf("resourceSpans[0].scopeSpans[0].spans[2]: cannot decode the span: unexpected EOF: invalid wire type 7 at byte offset %d of the body, in the tag of field 5, inside field 9 at byte offset %d", second, attr),
		} {
			if !strings.Contains(msg, w) {
				t.Errorf("partial success %q lacks %q", msg, w)
			}
		}
		if n := resp.PartialSuccess().RejectedSpans(); n != 2 || stored("wiretype-http") != 2 {
			t.Errorf("%d rejected, %d stored; want 2 and the 2 good spans", n, stored("wiretype-http"))
		}
	})
	t.Run("span_grpc", func(t *testing.T) {
		b, _ := traces("wiretype-grpc", 4, nil).MarshalProto()
		// At the start of span 3: pdata says "illegal wireType 7".
		bad := rewriteSpanProto(t, b, 3, func(span []byte) []byte { return append(bytes.Clone(tag), span...) })
		cc := dialGRPC(t, e)
		req, resp := rawMessage(bad), rawMessage(nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokAcme)
		if err := cc.Invoke(ctx, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", &req, &resp,
			grpc.ForceCodecV2(rawCodec{})); err != nil {
			t.Fatal(err)
		}
		r := ptraceotlp.NewExportResponse()
		if err := r.UnmarshalProto(resp); err != nil {
			t.Fatal(err)
		}
		w := fmt.Sprintf("resourceSpans[0].scopeSpans[0].spans[3]: cannot decode the span: proto: illegal wireType 7: invalid wire type 7 at byte offset %d of the body, in the tag of field 20, inside the span", at(bad))
		if msg := r.PartialSuccess().ErrorMessage(); !strings.Contains(msg, w) || stored("wiretype-grpc") != 3 {
			t.Errorf("partial success %q, %d stored; want %q and 3 stored", msg, stored("wiretype-grpc"), w)
		}
	})
	t.Run("resource_refused_whole", func(t *testing.T) {
		b, _ := traces("wiretype-resource", 2, nil).MarshalProto()
		// At the end of the resource (field 1 of resource_spans, which
		// starts at byte offset 3 past its tag and 2-byte length).
		bad := rewriteField(t, b, 1, func(_ int, rs []byte) []byte {
			return rewriteField(t, rs, 1, func(_ int, res []byte) []byte { return append(slices.Clip(res), tag...) })
		})
		a := e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, bad)
		w := fmt.Sprintf("cannot decode OTLP protobuf: unexpected EOF: invalid wire type 7 at byte offset %d, in the tag of field 20, inside field 1 at byte offset 3", at(bad))
		if a.status != 400 || !strings.Contains(a.body, w) || stored("wiretype-resource") != 0 {
			t.Errorf("%d %s, %d stored; want 400, %q and nothing stored", a.status, a.body, stored("wiretype-resource"), w)
		}
	})
}

// fieldAt returns the byte offsets in b of the value, the tag and the end
// of the i-th field num (of type bytes) of the message whose value starts
// at byte offset lo.
func fieldAt(t *testing.T, b []byte, lo int, num protowire.Number, i int) (value, tag, end int) {
	t.Helper()
	for off := lo; off < len(b); {
		n, typ, tl := protowire.ConsumeTag(b[off:])
		if tl < 0 {
			break
		}
		if typ == protowire.BytesType {
			l, ll := protowire.ConsumeVarint(b[off+tl:])
			if n == num {
				if i == 0 {
					return off + tl + ll, off, off + tl + ll + int(l)
				}
				i--
			}
			off += tl + ll + int(l)
			continue
		}
		fl := protowire.ConsumeFieldValue(n, typ, b[off+tl:])
		if fl < 0 {
			break
		}
		off += tl + fl
	}
	t.Fatalf("no field %d at %d", num, lo)
	return 0, 0, 0
}
