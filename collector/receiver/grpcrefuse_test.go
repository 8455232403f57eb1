package receiver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestGRPC_RequestRefusedWhole: an OTLP/gRPC request that cannot be taken
// at all (cut short, or nested too deep) is answered InvalidArgument (the
// OTLP status for a request refused for good, not gRPC's Internal) with
// the reason, and counted and logged as the same request over OTLP/HTTP
// is; the good request after it on the same connection is taken. Found
// from outside: such requests were answered "grpc: failed to unmarshal
// the received message: unexpected EOF" (Internal) and appeared in no
// metric and no log line.
func TestGRPC_RequestRefusedWhole(t *testing.T) {
	e := newEnv(t, nil)
	cc := dialGRPC(t, e)
	send := func(body []byte) (ptraceotlp.ExportResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokAcme)
		// A real OTLP exporter cannot send a cut-short message, which a
		// broken client or proxy can: the bytes go raw.
		in, out := rawMessage(body), rawMessage(nil)
		err := cc.Invoke(ctx, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", &in, &out, grpc.ForceCodecV2(rawCodec{}))
		resp := ptraceotlp.NewExportResponse()
		if err == nil {
			if err := resp.UnmarshalProto(out); err != nil {
				t.Fatal(err)
			}
		}
		return resp, err
	}
	good, err := traces("thegram", 3, nil).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	// A deep value no span can be blamed for (a span's own is rejected
	// alone: TestGRPC_DeepSpanRejectedAlone).
	deep := deepResourceAlone(t)
	for _, tc := range []struct {
		name, reason, want string
		body               []byte
	}{
		// Where it breaks, in the message's bytes, as over HTTP.
		{"cut_short", "decode_error", fmt.Sprintf("cannot decode OTLP protobuf: unexpected EOF: the body is cut short at byte offset %d, inside field 1 at byte offset 0", len(good)-7), good[:len(good)-7]},
		{"not_otlp", "decode_error", "cannot decode OTLP protobuf: ", []byte("\xff\xff\xff\xff not protobuf")},
		{"too_deep", "too_deep", "max_depth", deep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := send(tc.body)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("%v; want InvalidArgument naming %q", err, tc.want)
			}
		})
	}
	for reason, want := range map[string]float64{"decode_error": 2, "too_deep": 1} {
		got := testutil.ToFloat64(counter(t, e.reg, "mcpaudit_ingest_rejected_total", map[string]string{"source": "otlp_grpc", "reason": reason}))
		if got != want {
			t.Errorf("mcpaudit_ingest_rejected_total{source=otlp_grpc,reason=%s} = %v, want %v", reason, got, want)
		}
	}
	lines := e.logs.lines(t, "rejected_request")
	if len(lines) != 3 {
		t.Errorf("%d rejected_request log lines, want 3: %v", len(lines), lines)
	}
	for _, l := range lines {
		if l["transport"] != "otlp_grpc" || l["tenant"] != "acme" {
			t.Errorf("log line %v: want transport otlp_grpc and tenant acme", l)
		}
	}
	if resp, err := send(good); err != nil || resp.PartialSuccess().RejectedSpans() != 0 {
		t.Fatalf("good request after the refused ones: %v, %d rejected", err, resp.PartialSuccess().RejectedSpans())
	}
	if n := len(e.stored(t)); n != 3 {
		t.Errorf("%d calls stored, want the 3 of the good request", n)
	}
}

// TestGRPC_MessageOverLimit: an OTLP/gRPC message over
// serve.receiver.max_body_bytes, plain or gzip (a bomb that inflates past
// it), is answered by gRPC itself with ResourceExhausted before any
// handler runs, and is counted as too_large and logged (naming the
// setting), as the 413 over HTTP is. Found from outside: it appeared in no
// metric and no log line.
func TestGRPC_MessageOverLimit(t *testing.T) {
	e := newEnv(t, func(c *receiver.Config, _ *pipeline.Config) { c.MaxBodyBytes = 1 << 20 })
	cc := dialGRPC(t, e)
	client := ptraceotlp.NewGRPCClient(cc)
	big := traces("thegram", 3, func(sp ptrace.Span) {
		sp.Attributes().PutStr("gen_ai.tool.call.result", `{"isError":false,"structuredContent":{"text":"`+strings.Repeat("a", 2<<20)+`"}}`)
	})
	for _, tc := range []struct {
		name string
		opts []grpc.CallOption
	}{
		{"plain", nil},
		{"gzip_bomb", []grpc.CallOption{grpc.UseCompressor(gzip.Name)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokAcme)
			_, err := client.Export(ctx, big, tc.opts...)
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("%v; want ResourceExhausted", err)
			}
		})
	}
	// The stats handler sees the end of the RPC after the client does.
	var lines []map[string]any
	for range 100 {
		if lines = e.logs.lines(t, "rejected_request"); len(lines) >= 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(lines) != 2 {
		t.Errorf("%d rejected_request log lines, want 2: %v", len(lines), lines)
	}
	for _, l := range lines {
		if l["transport"] != "otlp_grpc" || l["tenant"] != "acme" || l["reason"] != "too_large" || !strings.Contains(l["error"].(string), "serve.receiver.max_body_bytes") {
			t.Errorf("log line %v: want otlp_grpc, tenant acme, too_large, naming serve.receiver.max_body_bytes", l)
		}
	}
	if got := testutil.ToFloat64(counter(t, e.reg, "mcpaudit_ingest_rejected_total", map[string]string{"source": "otlp_grpc", "reason": "too_large"})); got != 2 {
		t.Errorf("mcpaudit_ingest_rejected_total{source=otlp_grpc,reason=too_large} = %v, want 2", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokAcme)
	if _, err := client.Export(ctx, traces("thegram", 2, nil)); err != nil {
		t.Fatalf("good request after the refused ones: %v", err)
	}
}

// TestGRPC_BytesInFlight: an OTLP/gRPC request holds its share of the
// bytes in flight (serve.receiver.max_in_flight_bytes) while it is decoded
// and processed, as an OTLP/HTTP request does, and one that would pass
// them is answered Unavailable naming the setting, counted as overloaded,
// with nothing stored; sent again once there is room, it is taken. Found
// from outside: 32 gRPC clients sending 19 MiB messages to a serve with
// memory_limit 256MiB took it to a peak RSS of 497 MiB (234 MiB over
// OTLP/HTTP), the bytes in flight at 0 all along.
func TestGRPC_BytesInFlight(t *testing.T) {
	e := newEnv(t, func(c *receiver.Config, _ *pipeline.Config) {
		c.MaxBodyBytes, c.MaxInFlightBytes = 1<<20, 4<<20
	})
	client := ptraceotlp.NewGRPCClient(dialGRPC(t, e))
	export := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := client.Export(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokAcme), traces("thegram", 10, nil))
		return err
	}
	// Other requests hold all but 1,000 bytes: the message (about 1,700
	// bytes, four times that once decoded) does not fit.
	release, ok := e.rc.HoldInFlight(4<<20 - 1000)
	if !ok {
		t.Fatal("cannot hold the bytes in flight")
	}
	err := export()
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "serve.receiver.max_in_flight_bytes") {
		t.Fatalf("with the bytes in flight at their limit: %v, want Unavailable naming serve.receiver.max_in_flight_bytes", err)
	}
	if n := len(e.stored(t)); n != 0 {
		t.Errorf("%d calls stored from the refused request, want 0", n)
	}
	if n := e.rejectedCount(t, metrics.RejectOverloaded, metrics.SourceOTLPGRPC); n != 1 {
		t.Errorf("%v requests counted as overloaded, want 1", n)
	}
	release()
	if err := export(); err != nil {
		t.Fatalf("sent again with room: %v", err)
	}
	if n := len(e.stored(t)); n != 10 {
		t.Errorf("%d calls stored, want 10", n)
	}
	if n := e.rc.InFlightBytes(); n != 0 {
		t.Errorf("%d bytes in flight once every request is answered, want 0", n)
	}
}

// TestGRPC_StalledMessage: an OTLP/gRPC stream whose message does not
// arrive within serve.receiver.body_timeout is ended with DeadlineExceeded
// naming the setting, counted as timeout, and its slot of
// max_concurrent_streams is freed, as an HTTP body that slow is answered
// 408. Found from outside: one client holding 16 streams open (headers
// sent, the message never) kept every other OTLP/gRPC request answered
// "the collector processes 16 gRPC requests" for as long as it liked.
func TestGRPC_StalledMessage(t *testing.T) {
	e := newEnv(t, func(c *receiver.Config, _ *pipeline.Config) {
		c.MaxConcurrentStreams, c.BodyTimeout = 2, 300*time.Millisecond
	})
	cc := dialGRPC(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokAcme)
	var stalled []grpc.ClientStream
	for range 2 {
		s, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
			"/opentelemetry.proto.collector.trace.v1.TraceService/Export", grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, s)
	}
	// gRPC answers with the context's error before the handler can (the
	// reason is in the log line).
	for i, s := range stalled {
		var out rawMessage
		if err := s.RecvMsg(&out); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("stream %d, its message never sent: %v, want DeadlineExceeded", i, err)
		}
	}
	if _, err := ptraceotlp.NewGRPCClient(cc).Export(ctx, traces("thegram", 3, nil)); err != nil {
		t.Fatalf("once the stalled streams are cut: %v", err)
	}
	if n := len(e.stored(t)); n != 3 {
		t.Errorf("%d calls stored, want 3", n)
	}
	if n := e.rejectedCount(t, metrics.RejectTimeout, metrics.SourceOTLPGRPC); n != 2 {
		t.Errorf("%v requests counted as timeout, want 2", n)
	}
	ls := e.logs.lines(t, "rejected_request")
	if len(ls) != 2 || ls[0]["reason"] != string(metrics.RejectTimeout) || !strings.Contains(ls[0]["error"].(string), "serve.receiver.body_timeout") {
		t.Errorf("rejected_request lines %v, want two of reason timeout naming serve.receiver.body_timeout", ls)
	}
}

// TestGRPC_BytesInFlightGivenBack: the bytes in flight an Export message
// took are given back however its stream ends after the message was read:
// the sender gone before it closed its side (gRPC reads on after the
// message of a unary call, to see it end), or a second message on the
// stream (refused by gRPC, which decodes it into the same request first).
// Found from outside: exporters that gave up after 40 ms left 96 MiB of
// the bytes in flight held for good.
func TestGRPC_BytesInFlightGivenBack(t *testing.T) {
	e := newEnv(t, nil)
	cc := dialGRPC(t, e)
	msg, err := traces("thegram", 3, nil).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	open := func(ctx context.Context) grpc.ClientStream {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokAcme)
		s, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
			"/opentelemetry.proto.collector.trace.v1.TraceService/Export", grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	given := func(t *testing.T, what string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); e.rc.InFlightBytes() != 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d bytes in flight held after the stream ended, want 0", what, e.rc.InFlightBytes())
			}
		}
	}
	t.Run("sender_gone", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		s := open(ctx)
		m := rawMessage(msg)
		if err := s.SendMsg(&m); err != nil {
			t.Fatal(err)
		}
		// The message is read once the bytes in flight hold it.
		for deadline := time.Now().Add(5 * time.Second); e.rc.InFlightBytes() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no bytes in flight held 5 s after the message was sent: the test would prove nothing")
			}
		}
		cancel()
		given(t, "sender gone after its message")
	})
	t.Run("two_messages", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s := open(ctx)
		for range 2 {
			m := rawMessage(msg)
			if err := s.SendMsg(&m); err != nil {
				t.Fatal(err)
			}
		}
		s.CloseSend()
		var out rawMessage
		if err := s.RecvMsg(&out); status.Code(err) != codes.Internal {
			t.Errorf("two messages on a unary call: %v, want Internal (gRPC's cardinality violation)", err)
		}
		given(t, "two messages")
	})
}

// TestGRPC_SlowDecodeNotTimedOut: the body timeout of an OTLP/gRPC
// message counts the time the sender takes to send it, not the time the
// collector takes to decode it. Here the message arrives at once and its
// salvage waits longer than the body timeout for the salvage slot (held by
// another request's): the request is taken. Found in review: such a
// request was answered DeadlineExceeded and counted as timeout, or
// Unavailable "cannot store calls now", as if the store were down.
func TestGRPC_SlowDecodeNotTimedOut(t *testing.T) {
	e := newEnv(t, func(c *receiver.Config, _ *pipeline.Config) {
		c.BodyTimeout = 300 * time.Millisecond
	})
	client := ptraceotlp.NewGRPCClient(dialGRPC(t, e))
	req, want, deep := deepSpansRequest()
	release := receiver.HoldSalvageSlot()
	time.AfterFunc(900*time.Millisecond, release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.Export(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokAcme), req)
	if err != nil {
		t.Fatalf("a message that arrived whole, decoded after the body timeout: %v", err)
	}
	checkDeepRejected(t, e, metrics.SourceOTLPGRPC, resp.PartialSuccess(), want, withReason(deep, protoDeep))
	if n := e.rejectedCount(t, metrics.RejectTimeout, metrics.SourceOTLPGRPC); n != 0 {
		t.Errorf("%v requests counted as timeout, want 0", n)
	}
}
