package receiver_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// rejectedCount reads mcpaudit_ingest_rejected_total for a reason and
// source.
func (e *env) rejectedCount(t *testing.T, reason metrics.RejectReason, src metrics.Source) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metrics.IngestRejectedTotal {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels[metrics.LabelReason] == string(reason) && labels[metrics.LabelSource] == string(src) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestRejectReasons: back-pressure for a tenant past its share of the open
// calls, and a store that refuses calls, are counted under reasons of their
// own, not as a full queue: the operator's next step differs.
func TestRejectReasons(t *testing.T) {
	t.Run("tenant_share", func(t *testing.T) {
		e := newEnv(t, func(_ *receiver.Config, p *pipeline.Config) { p.MaxOpenCalls = 60 })
		// Every call at one time: the partition's watermark stays a
		// lateness behind it, so they all stay open.
		at := now.Add(-time.Hour)
		rpc := 0
		calls := func(n int) []byte {
			var lines []string
			for range n {
				rpc++
				lines = append(lines, record("thegram", "gram_read", at, rpc))
			}
			return []byte(strings.Join(lines, "\n") + "\n")
		}
		if a := e.post(t, "/v1/calls", "application/x-ndjson", tokGlobex, calls(1)); a.status != 200 {
			t.Fatalf("globex: %d %s", a.status, a.body)
		}
		for i := range 3 {
			if a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, calls(10)); a.status != 200 {
				t.Fatalf("acme's batch %d: %d %s", i, a.status, a.body)
			}
		}
		a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, calls(10))
		if a.status != 429 || !strings.Contains(a.body, `tenant "acme"`) || a.header.Get("Retry-After") == "" {
			t.Fatalf("acme past its share: %d %q; want 429 naming the tenant, with Retry-After", a.status, a.body)
		}
		if n := e.rejectedCount(t, metrics.RejectTenantShare, metrics.SourceCallsHTTP); n != 10 {
			t.Errorf("%v calls counted as tenant_share, want 10", n)
		}
		if n := e.rejectedCount(t, metrics.RejectQueueFull, metrics.SourceCallsHTTP); n != 0 {
			t.Errorf("%v calls counted as queue_full, want 0", n)
		}
	})
	t.Run("bad_time", func(t *testing.T) {
		// A time that is not RFC 3339 and a negative duration are bad
		// times, not bad JSON: the sender's clock or encoder is at fault.
		e := newEnv(t, nil)
		good := record("thegram", "gram_read", now, 1)
		notATime := strings.Replace(record("thegram", "gram_read", now, 2), now.Format(time.RFC3339Nano), "yesterday", 1)
		negative := strings.Replace(record("thegram", "gram_read", now, 3), `"session":"s1"`, `"session":"s1","duration_ms":-5`, 1)
		a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(good+"\n"+notATime+"\n"+negative+"\n"))
		if a.status != 200 || !strings.Contains(a.body, `"rejected":2`) {
			t.Fatalf("%d %s, want 200 with 2 rejected", a.status, a.body)
		}
		if n := e.rejectedCount(t, metrics.RejectBadTime, metrics.SourceCallsHTTP); n != 2 {
			t.Errorf("%v records counted as bad_time, want 2", n)
		}
		if n := e.rejectedCount(t, metrics.RejectInvalidJSON, metrics.SourceCallsHTTP); n != 0 {
			t.Errorf("%v records counted as invalid_json, want 0", n)
		}
	})
	t.Run("duration_overflow", func(t *testing.T) {
		// A duration_ms past what a time.Duration holds would wrap to a
		// large negative duration: its record is rejected, named with its
		// line, the field and why, and the lines around it are stored.
		e := newEnv(t, nil)
		huge := strings.Replace(record("thegram", "gram_read", now, 2), `"session":"s1"`, `"session":"s1","duration_ms":1e308`, 1)
		body := record("thegram", "gram_read", now, 1) + "\n" + huge + "\n" + record("thegram", "gram_read", now, 3) + "\n"
		a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(body))
		if a.status != 200 || !strings.Contains(a.body, `"accepted":2`) || !strings.Contains(a.body, `"rejected":1`) ||
			!strings.Contains(a.body, `body:2: field duration_ms: 1e308 ms is longer than a duration can hold`) {
			t.Fatalf("%d %s, want 200 with 2 accepted and line 2 rejected for its duration_ms", a.status, a.body)
		}
		stored := e.stored(t)
		if len(stored) != 2 {
			t.Fatalf("%d calls stored, want the 2 good ones", len(stored))
		}
		for _, c := range stored {
			if c.Duration < 0 {
				t.Errorf("call %s stored with duration %v", c.ID, c.Duration)
			}
		}
		if n := e.rejectedCount(t, metrics.RejectBadTime, metrics.SourceCallsHTTP); n != 1 {
			t.Errorf("%v records counted as bad_time, want 1", n)
		}
	})
	t.Run("far_future", func(t *testing.T) {
		// A call dated more than serve.receiver.max_future (24h) ahead of
		// the collector's clock is a bad time, rejected on its line, its
		// neighbours taken: retention deletes by event time and would
		// keep it for ever. An hour ahead is a clock's skew: taken.
		e := newEnv(t, nil)
		lines := []string{
			record("thegram", "gram_read", now, 1),
			record("thegram", "gram_read", time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC), 2),
			record("thegram", "gram_read", time.Now().Add(25*time.Hour), 3),
			record("thegram", "gram_read", time.Now().Add(time.Hour), 4),
		}
		a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(strings.Join(lines, "\n")+"\n"))
		if a.status != 200 || !strings.Contains(a.body, `"accepted":2`) || !strings.Contains(a.body, `"rejected":2`) {
			t.Fatalf("%d %s, want 200 with 2 accepted, 2 rejected", a.status, a.body)
		}
		if !strings.Contains(a.body, `body:2: field time: 2200-01-01T00:00:00Z is more than 24h0m0s ahead of the collector's clock`) ||
			!strings.Contains(a.body, `body:3: field time: `) || !strings.Contains(a.body, `serve.receiver.max_future`) {
			t.Errorf("errors %s: want lines 2 and 3 naming the field, the reason and the setting", a.body)
		}
		if got := len(e.stored(t)); got != 2 {
			t.Errorf("%d calls stored, want the 2 good ones", got)
		}
		if n := e.rejectedCount(t, metrics.RejectBadTime, metrics.SourceCallsHTTP); n != 2 {
			t.Errorf("%v records counted as bad_time, want 2", n)
		}
	})
	t.Run("store_unavailable", func(t *testing.T) {
		e := newEnv(t, nil)
		e.store.Close()
		a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(record("thegram", "gram_read", now, 1)+"\n"))
		if a.status != 503 || a.header.Get("Retry-After") == "" {
			t.Fatalf("store closed: %d %q; want 503 with Retry-After", a.status, a.body)
		}
		if n := e.rejectedCount(t, metrics.RejectStoreDown, metrics.SourceCallsHTTP); n != 1 {
			t.Errorf("%v calls counted as store_unavailable, want 1", n)
		}
	})
}

// TestTooLargeForStore: a request larger than the store's whole call log
// (serve.sqlite.log_max_bytes) never fits, however long its sender waits:
// it is refused for good, 413 without Retry-After over HTTP (both paths)
// and InvalidArgument over gRPC, with the setting and both sizes in the
// message, its records counted once as too_large. A request that fits is
// still taken; a full log stays 503 (TestAckLog_Full in exporter/sqlite).
func TestTooLargeForStore(t *testing.T) {
	so := sqlite.NewDefaultOptions()
	so.Ack, so.LogMaxBytes = sqlite.AckLog, 64<<10
	e := newEnvStore(t, so, nil)
	// 400 KB of arguments, short random words (no secret for the
	// redactor to mask), that compression does not bring under the whole
	// log: under max_payload_bytes.
	r := rand.New(rand.NewPCG(1, 1))
	var words []byte
	for len(words) < 400_000 {
		for range 3 + r.IntN(6) {
			words = append(words, byte('a'+r.IntN(26)))
		}
		words = append(words, ' ')
	}
	big := string(words)
	bigRecord := strings.Replace(record("thegram", "gram_read", now, 1), `{"path":"a.gram"}`, `{"path":"`+big+`"}`, 1)
	wantMsg := func(t *testing.T, msg string) {
		t.Helper()
		if !strings.Contains(msg, "more than the spool's limit of 65536") || !strings.Contains(msg, "serve.sqlite.log_max_bytes") ||
			!strings.Contains(msg, "cannot spool a batch of ") {
			t.Errorf("refusal %q: want the setting and both sizes", msg)
		}
	}

	a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(record("thegram", "gram_read", now, 2)+"\n"+bigRecord+"\n"))
	if a.status != 413 || a.header.Get("Retry-After") != "" {
		t.Fatalf("/v1/calls larger than the call log: %d %q (Retry-After %q); want 413 without Retry-After", a.status, a.body, a.header.Get("Retry-After"))
	}
	wantMsg(t, a.body)
	if n := e.rejectedCount(t, metrics.RejectTooLarge, metrics.SourceCallsHTTP); n != 2 {
		t.Errorf("%v calls counted as too_large, want the request's 2", n)
	}

	spans := traces("thegram", 2, func(sp ptrace.Span) { sp.Attributes().PutStr("gen_ai.tool.call.arguments", `{"path":"`+big+`"}`) })
	body, _ := spans.MarshalProto()
	a = e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, body)
	if a.status != 413 || a.header.Get("Retry-After") != "" {
		t.Fatalf("/v1/traces larger than the call log: %d %q; want 413 without Retry-After", a.status, a.body)
	}
	wantMsg(t, a.body)

	client := ptraceotlp.NewGRPCClient(dialGRPC(t, e))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tokAcme)
	_, err := client.Export(ctx, spans)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("gRPC larger than the call log: %v; want InvalidArgument (not retried under OTLP)", err)
	}
	wantMsg(t, status.Convert(err).Message())

	if a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(record("thegram", "gram_read", now, 3)+"\n")); a.status != 200 {
		t.Errorf("a request that fits, after the refusals: %d %s", a.status, a.body)
	}
	if n := e.rejectedCount(t, metrics.RejectStoreDown, metrics.SourceCallsHTTP); n != 0 {
		t.Errorf("%v calls counted as store_unavailable, want 0", n)
	}
}

// TestGRPCWholeRequestRefusals: a request refused whole before its spans
// are read (values nested too deep where no span holds them, a message over the size limit, bytes
// that are not OTLP) is counted in mcpaudit_ingest_rejected_total over
// OTLP/gRPC under the reason OTLP/HTTP counts it under, once per request.
func TestGRPCWholeRequestRefusals(t *testing.T) {
	e := newEnv(t, func(c *receiver.Config, _ *pipeline.Config) { c.MaxBodyBytes = 1 << 20 })
	cc := dialGRPC(t, e)
	// A deep value no span can be blamed for (a span's own is rejected
	// alone: TestOTLPProto_DeepSpanRejectedAlone).
	deep := deepResourceAlone(t)
	large, _ := traces("thegram", 1, func(sp ptrace.Span) {
		sp.Attributes().PutStr("gen_ai.tool.call.arguments", strings.Repeat("a", 2<<20))
	}).MarshalProto()
	for _, tc := range []struct {
		name   string
		body   []byte
		reason metrics.RejectReason
		status int
		code   codes.Code
	}{
		{"too_deep", deep, metrics.RejectTooDeep, 400, codes.InvalidArgument},
		{"too_large", large, metrics.RejectTooLarge, 413, codes.ResourceExhausted},
		// A resource's field 1 that declares more bytes than follow.
		{"not_otlp", []byte{0x0a, 0x05, 0x0a, 0x7f, 0x00}, metrics.RejectDecodeError, 400, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if a := e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, tc.body); a.status != tc.status {
				t.Fatalf("OTLP/HTTP: %d %.200s, want %d", a.status, a.body, tc.status)
			}
			if n := e.rejectedCount(t, tc.reason, metrics.SourceOTLPHTTP); n != 1 {
				t.Fatalf("OTLP/HTTP: %v requests counted as %s, want 1", n, tc.reason)
			}
			req, resp := rawMessage(tc.body), rawMessage(nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokAcme)
			err := cc.Invoke(ctx, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", &req, &resp,
				grpc.ForceCodecV2(rawCodec{}))
			if status.Code(err) != tc.code {
				t.Fatalf("OTLP/gRPC: %v, want %s", err, tc.code)
			}
			// gRPC's size limit is counted by a stats handler, which sees
			// the RPC's end after the client has its status: wait for it.
			n := e.rejectedCount(t, tc.reason, metrics.SourceOTLPGRPC)
			for end := time.Now().Add(5 * time.Second); n == 0 && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
				n = e.rejectedCount(t, tc.reason, metrics.SourceOTLPGRPC)
			}
			if n != 1 {
				t.Errorf("OTLP/gRPC: %v requests counted as %s, want 1 as over OTLP/HTTP", n, tc.reason)
			}
		})
	}
}

// TestRejectedSpan_CountedByKind: a rejected span is counted and logged
// under the reason it was rejected for (otlp.RejectedSpan.Kind), whatever
// its words: a span nested too deep whose words do not end in
// "(serve.receiver.max_depth)" is still too_deep, and a span that is not
// a usable call whose words do is still bad_span. The words reach the
// sender and the log as they are. The count was once read off the words.
func TestRejectedSpan_CountedByKind(t *testing.T) {
	e := newEnv(t, nil)
	pre := []otlp.RejectedSpan{
		{Path: "resourceSpans[0].scopeSpans[0].spans[0]", Reason: "an attribute value nests too deep, past serve.receiver.max_depth", Kind: string(metrics.RejectTooDeep)},
		{Path: "resourceSpans[0].scopeSpans[0].spans[1]", Reason: "traceId: must be 16 bytes, not 3 (serve.receiver.max_depth)"}, // no Kind: bad_span
		{Path: "resourceSpans[1].scopeSpans[0].spans[0]", Reason: "its resource: nested too deep", Kind: string(metrics.RejectTooDeep)},
	}
	resp, refused := e.rc.ExportRejected(context.Background(), "acme", pre)
	if refused {
		t.Fatal("the request was refused, want a partial success")
	}
	ps := resp.PartialSuccess()
	if want := pre[0].Error() + "; " + pre[1].Error() + "; " + pre[2].Error(); ps.RejectedSpans() != 3 || ps.ErrorMessage() != want {
		t.Errorf("partial success %d %q, want 3 %q", ps.RejectedSpans(), ps.ErrorMessage(), want)
	}
	if n := e.rejectedCount(t, metrics.RejectTooDeep, metrics.SourceOTLPHTTP); n != 2 {
		t.Errorf("%v spans counted as too_deep, want 2", n)
	}
	if n := e.rejectedCount(t, metrics.RejectBadSpan, metrics.SourceOTLPHTTP); n != 1 {
		t.Errorf("%v spans counted as bad_span, want 1", n)
	}
	ls := e.logs.lines(t, "rejected_span")
	if len(ls) != len(pre) {
		t.Fatalf("%d rejected_span log lines, want %d: %v", len(ls), len(pre), ls)
	}
	for i, l := range ls {
		if l["reason"] != string(receiver.SpanReason(pre[i])) || l["error"] != pre[i].Error() {
			t.Errorf("log line %v: want reason %s, error %q", l, receiver.SpanReason(pre[i]), pre[i].Error())
		}
	}
}
