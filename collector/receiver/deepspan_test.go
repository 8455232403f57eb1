package receiver_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// nestSlice puts under key in m a slice nested depth slices deep.
func nestSlice(m pcommon.Map, key string, depth int) {
	v := m.PutEmptySlice(key)
	for range depth {
		v = v.AppendEmpty().SetEmptySlice()
	}
}

// deepSpansRequest is a request of nine spans, five of which hold, or sit
// under a resource or scope that holds, a value nested 200 deep (past the
// limit of 32): span 1 of the first scope; the one span of a second scope
// with a deep scope attribute; both spans of a second resource with a deep
// resource attribute; span 0 of a third resource, in an event. Each span
// is a call of its own (server, JSON-RPC id); want are the calls of the
// four good spans, deep the paths of the five others.
func deepSpansRequest() (req ptraceotlp.ExportRequest, want, deep []string) {
	td := ptrace.NewTraces()
	id := 0
	add := func(server string, ss ptrace.ScopeSpans, bad bool) ptrace.Span {
		sp := appendCall(ss, id, "s1", now.Add(time.Duration(id)*time.Millisecond))
		if !bad {
			want = append(want, fmt.Sprintf("%s/%d", server, id))
		}
		id++
		return sp
	}
	a := td.ResourceSpans().AppendEmpty()
	a.Resource().Attributes().PutStr("service.name", "deep-a")
	ss := a.ScopeSpans().AppendEmpty()
	add("deep-a", ss, false)
	nestSlice(add("deep-a", ss, true).Attributes(), "deep", 200)
	add("deep-a", ss, false)
	ss = a.ScopeSpans().AppendEmpty()
	nestSlice(ss.Scope().Attributes(), "deep", 200)
	add("deep-a", ss, true)

	b := td.ResourceSpans().AppendEmpty()
	b.Resource().Attributes().PutStr("service.name", "deep-b")
	nestSlice(b.Resource().Attributes(), "deep", 200)
	ss = b.ScopeSpans().AppendEmpty()
	add("deep-b", ss, true)
	add("deep-b", ss, true)

	c := td.ResourceSpans().AppendEmpty()
	c.Resource().Attributes().PutStr("service.name", "deep-c")
	ss = c.ScopeSpans().AppendEmpty()
	ev := add("deep-c", ss, true).Events().AppendEmpty()
	ev.SetName("retry")
	nestSlice(ev.Attributes(), "deep", 200)
	add("deep-c", ss, false)
	add("deep-c", ss, false)
	deep = []string{
		"resourceSpans[0].scopeSpans[0].spans[1]: ",
		"resourceSpans[0].scopeSpans[1].spans[0]: its scope: ",
		"resourceSpans[1].scopeSpans[0].spans[0]: its resource: ",
		"resourceSpans[1].scopeSpans[0].spans[1]: its resource: ",
		"resourceSpans[2].scopeSpans[0].spans[0]: ",
	}
	return ptraceotlp.NewExportRequestFromTraces(td), want, deep
}

// withReason returns each of deep followed by why.
func withReason(deep []string, why string) []string {
	out := make([]string, len(deep))
	for i, d := range deep {
		out[i] = d + why
	}
	return out
}

// protoDeep is why a span is rejected over protobuf, jsonDeep the start
// of why over JSON (the byte offset follows).
const (
	protoDeep = "an attribute value nests more than 32 arrays or key-value lists (serve.receiver.max_depth)"
	jsonDeep  = "nested deeper than 112 levels at byte offset "
)

// storedCalls returns the calls stored, as server/JSON-RPC id, sorted.
func (e *env) storedCalls(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, c := range e.stored(t) {
		out = append(out, c.Server+"/"+c.RPCID)
	}
	slices.Sort(out)
	return out
}

// checkDeepRejected checks the answer to deepSpansRequest: the deep spans
// rejected, each named with its path and the reason, counted as too_deep
// and logged, and the good spans stored.
func checkDeepRejected(t *testing.T, e *env, src metrics.Source, ps ptraceotlp.ExportPartialSuccess, want, deep []string) {
	t.Helper()
	if ps.RejectedSpans() != int64(len(deep)) {
		t.Errorf("%d spans rejected (%q), want %d", ps.RejectedSpans(), ps.ErrorMessage(), len(deep))
	}
	for _, d := range deep {
		if !strings.Contains(ps.ErrorMessage(), d) {
			t.Errorf("partial success %q does not name %q", ps.ErrorMessage(), d)
		}
	}
	if !strings.Contains(ps.ErrorMessage(), "(serve.receiver.max_depth)") {
		t.Errorf("partial success %q does not name serve.receiver.max_depth", ps.ErrorMessage())
	}
	slices.Sort(want)
	if got := e.storedCalls(t); !slices.Equal(got, want) {
		t.Errorf("stored %v, want the good spans %v", got, want)
	}
	if n := e.rejectedCount(t, metrics.RejectTooDeep, src); n != float64(len(deep)) {
		t.Errorf("%v spans counted as too_deep, want %d", n, len(deep))
	}
	if n := e.rejectedCount(t, metrics.RejectBadSpan, src); n != 0 {
		t.Errorf("%v spans counted as bad_span, want 0", n)
	}
	if ls := e.logs.lines(t, "rejected_span"); len(ls) != len(deep) {
		t.Errorf("%d rejected_span log lines, want %d: %v", len(ls), len(deep), ls)
	} else {
		for _, l := range ls {
			if l["reason"] != "too_deep" {
				t.Errorf("log line %v: want reason too_deep", l)
			}
		}
	}
}

// TestOTLPProto_DeepSpanRejectedAlone: over OTLP/HTTP protobuf, a value
// nested deeper than serve.receiver.max_depth rejects only the span that
// holds it (in its attributes or an event's), or the spans of the resource
// or scope that holds it; the good spans beside them are stored. Found by
// an adversarial pass: the whole request was refused, no span named.
func TestOTLPProto_DeepSpanRejectedAlone(t *testing.T) {
	e := newEnv(t, nil)
	req, want, deep := deepSpansRequest()
	b, err := req.MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	a := e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, b)
	resp := ptraceotlp.NewExportResponse()
	if a.status != 200 || resp.UnmarshalProto([]byte(a.body)) != nil {
		t.Fatalf("%d %.300q, want 200 with a partial success", a.status, a.body)
	}
	checkDeepRejected(t, e, metrics.SourceOTLPHTTP, resp.PartialSuccess(), want, withReason(deep, protoDeep))
}

// TestGRPC_DeepSpanRejectedAlone is TestOTLPProto_DeepSpanRejectedAlone
// over OTLP/gRPC, with the OpenTelemetry client.
func TestGRPC_DeepSpanRejectedAlone(t *testing.T) {
	e := newEnv(t, nil)
	client := ptraceotlp.NewGRPCClient(dialGRPC(t, e))
	req, want, deep := deepSpansRequest()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.Export(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokAcme), req)
	if err != nil {
		t.Fatal(err)
	}
	checkDeepRejected(t, e, metrics.SourceOTLPGRPC, resp.PartialSuccess(), want, withReason(deep, protoDeep))
}

// TestOTLPJSON_DeepSpanRejectedAlone is TestOTLPProto_DeepSpanRejectedAlone
// over OTLP/HTTP JSON: each span is named with the byte offset where its
// nesting passes the limit.
func TestOTLPJSON_DeepSpanRejectedAlone(t *testing.T) {
	e := newEnv(t, nil)
	req, want, deep := deepSpansRequest()
	b, err := req.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	a := e.post(t, "/v1/traces", "application/json", tokAcme, b)
	resp := ptraceotlp.NewExportResponse()
	if a.status != 200 || resp.UnmarshalJSON([]byte(a.body)) != nil {
		t.Fatalf("%d %.300q, want 200 with a partial success", a.status, a.body)
	}
	checkDeepRejected(t, e, metrics.SourceOTLPHTTP, resp.PartialSuccess(), want, withReason(deep, jsonDeep))
	// The offset named is where the body passes 112 levels: the 113th
	// bracket open there.
	msg := resp.PartialSuccess().ErrorMessage()
	i := strings.Index(msg, jsonDeep)
	var at int
	if _, err := fmt.Sscanf(msg[i+len(jsonDeep):], "%d", &at); err != nil || at <= 0 || at >= len(b) || (b[at] != '[' && b[at] != '{') {
		t.Fatalf("offset in %q: %d, %v; want a bracket of the body", msg, at, err)
	}
	depth := 0
	for _, c := range b[:at+1] {
		switch c {
		case '[', '{':
			depth++
		case ']', '}':
			depth--
		}
	}
	if depth != 113 {
		t.Errorf("the body is %d levels deep at byte offset %d, want 113", depth, at)
	}
}

// TestOTLPProto_DeepAndBrokenSpans: a request with a span nested too deep
// and another whose span id pdata cannot decode loses those two alone,
// each named with its reason and counted under its own, over OTLP/HTTP
// protobuf and OTLP/gRPC.
func TestOTLPProto_DeepAndBrokenSpans(t *testing.T) {
	e := newEnv(t, nil)
	b, err := traces("thegram", 3, func(sp ptrace.Span) { nestSlice(sp.Attributes(), "deep", 200) }).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	b = breakSpanProto(t, b, 2)
	for _, tr := range []struct {
		src  metrics.Source
		send func() (ptraceotlp.ExportResponse, error)
	}{
		{metrics.SourceOTLPHTTP, func() (ptraceotlp.ExportResponse, error) {
			a := e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, b)
			resp := ptraceotlp.NewExportResponse()
			if a.status != 200 {
				return resp, fmt.Errorf("%d %.300q", a.status, a.body)
			}
			return resp, resp.UnmarshalProto([]byte(a.body))
		}},
		{metrics.SourceOTLPGRPC, func() (ptraceotlp.ExportResponse, error) {
			return sendRawGRPC(t, dialGRPC(t, e), b)
		}},
	} {
		t.Run(string(tr.src), func(t *testing.T) {
			resp, err := tr.send()
			if err != nil {
				t.Fatal(err)
			}
			ps := resp.PartialSuccess()
			for _, w := range []string{
				"resourceSpans[0].scopeSpans[0].spans[0]: an attribute value nests more than 32 arrays or key-value lists (serve.receiver.max_depth)",
				"resourceSpans[0].scopeSpans[0].spans[2]: spanId: must be 8 bytes, not 3",
			} {
				if !strings.Contains(ps.ErrorMessage(), w) {
					t.Errorf("partial success %q does not name %q", ps.ErrorMessage(), w)
				}
			}
			if ps.RejectedSpans() != 2 {
				t.Errorf("%d rejected, want 2", ps.RejectedSpans())
			}
			if n := e.rejectedCount(t, metrics.RejectTooDeep, tr.src); n != 1 {
				t.Errorf("%v counted as too_deep, want 1", n)
			}
			if n := e.rejectedCount(t, metrics.RejectBadSpan, tr.src); n != 1 {
				t.Errorf("%v counted as bad_span, want 1", n)
			}
		})
	}
	// Both transports took span 1, the same call: stored once.
	if got := e.storedCalls(t); !slices.Equal(got, []string{"thegram/1"}) {
		t.Errorf("stored %v, want span 1 alone", got)
	}
}

// deepResourceAlone is a request whose one resource holds a value nested
// 5000 deep and no span: no span to blame, the request is refused whole.
func deepResourceAlone(t *testing.T) []byte {
	t.Helper()
	td := ptrace.NewTraces()
	nestSlice(td.ResourceSpans().AppendEmpty().Resource().Attributes(), "deep", 5000)
	b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sendRawGRPC sends the bytes b as an Export request over cc, as they are
// (an OpenTelemetry client cannot send a span id of 3 bytes).
func sendRawGRPC(t *testing.T, cc *grpc.ClientConn, b []byte) (ptraceotlp.ExportResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokAcme)
	in, out := rawMessage(b), rawMessage(nil)
	resp := ptraceotlp.NewExportResponse()
	if err := cc.Invoke(ctx, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", &in, &out, grpc.ForceCodecV2(rawCodec{})); err != nil {
		return resp, err
	}
	return resp, resp.UnmarshalProto(out)
}

// TestOTLPProto_DeepAndUndecodable: a request with a span nested too deep
// and a fault no span is to blame for (a resource's schema_url sent as a
// varint, which pdata refuses) is refused whole as it was before, for its
// depth: the offsets of the rebuilt request would name no place in the
// body sent.
func TestOTLPProto_DeepAndUndecodable(t *testing.T) {
	e := newEnv(t, nil)
	b, err := traces("thegram", 3, func(sp ptrace.Span) { nestSlice(sp.Attributes(), "deep", 200) }).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	b = rewriteField(t, b, 1, func(_ int, rs []byte) []byte {
		rs = protowire.AppendTag(rs, 3, protowire.VarintType)
		return protowire.AppendVarint(rs, 7)
	})
	a := e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, b)
	if a.status != 400 || !strings.Contains(a.body, "cannot take OTLP protobuf: an attribute value nests more than 32") {
		t.Fatalf("%d %.300q, want 400 refusing the request for its depth", a.status, a.body)
	}
	if _, err := sendRawGRPC(t, dialGRPC(t, e), b); err == nil || !strings.Contains(err.Error(), "cannot take OTLP protobuf: an attribute value nests more than 32") {
		t.Fatalf("OTLP/gRPC: %v, want the request refused for its depth", err)
	}
	for _, src := range []metrics.Source{metrics.SourceOTLPHTTP, metrics.SourceOTLPGRPC} {
		if n := e.rejectedCount(t, metrics.RejectTooDeep, src); n != 1 {
			t.Errorf("%s: %v counted as too_deep, want 1", src, n)
		}
	}
	if n := len(e.stored(t)); n != 0 {
		t.Errorf("%d calls stored, want none", n)
	}
}
