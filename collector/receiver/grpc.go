package receiver

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/internal/access"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// exportCtx checks and ingests the calls of an OTLP request; unusable
// spans are reported as a partial success, with pre, the spans a salvage
// emptied (salvageProto, salvageJSON).
func (rc *Receiver) exportCtx(ctx context.Context, src metrics.Source, tenant string, req ptraceotlp.ExportRequest, pre []otlp.RejectedSpan) (ptraceotlp.ExportResponse, *refusal) {
	td := req.Traces()
	crowded := rc.crowded(td)
	prefix := string(src) + ":"
	tk := rc.newTaker(src, tenant)
	defer tk.done()
	return rc.exportRead(ctx, src, tenant, tk, prefix, withRejected(otlp.Read(td, prefix, tk.reader), pre), crowded)
}

// withRejected puts the spans a salvage emptied (pre) first among res's
// rejected spans, and takes them out of its ignored ones: each was read
// as an empty span, which is not an MCP call.
func withRejected(res otlp.Result, pre []otlp.RejectedSpan) otlp.Result {
	if len(pre) == 0 {
		return res
	}
	res.Rejected = append(slices.Clip(pre), res.Rejected...)
	res.Ignored = max(0, res.Ignored-len(pre))
	return res
}

// exportWire is exportCtx for a request read straight from its bytes
// (otlp.ReadProto). No span of it is crowded: CheckProto, with the same
// limit, leaves those to pdata.
func (rc *Receiver) exportWire(ctx context.Context, src metrics.Source, tenant string, m otlp.Message, pre []otlp.RejectedSpan) (ptraceotlp.ExportResponse, *refusal) {
	prefix := string(src) + ":"
	tk := rc.newTaker(src, tenant)
	defer tk.done()
	// The converter's parsers and buffers keep their room from one
	// request to the next; the records share nothing with it.
	cv := rc.convs.Get().(*otlp.Converter)
	res := withRejected(cv.ReadProto(m, prefix, tk.reader), pre)
	rc.convs.Put(cv)
	return rc.exportRead(ctx, src, tenant, tk, prefix, res, nil)
}

// spanReason is the reason a rejected span is counted under: its Kind,
// bad_span when the converter left it empty, as analyze counts it.
func spanReason(r otlp.RejectedSpan) metrics.RejectReason {
	return metrics.RejectReason(r.CountedAs())
}

// exportRead checks and ingests the calls read of an OTLP request by tk's
// reader; crowded names the spans with too many attributes.
func (rc *Receiver) exportRead(ctx context.Context, src metrics.Source, tenant string, tk *taker, prefix string, res otlp.Result, crowded map[string]string) (ptraceotlp.ExportResponse, *refusal) {
	rejected := res.Rejected
	for _, r := range res.Rejected {
		reason := spanReason(r)
		rc.rejected(src, reason, 1)
		rc.logRejected("rejected_span", src, tenant, reason, r.Path+": "+r.Reason)
	}
	if rc.metrics != nil {
		rc.metrics.IngestIgnored(src, res.Ignored)
	}
	rc.logIgnored(src, tenant, res.Ignored)
	for i, c := range res.Records {
		path := strings.TrimPrefix(c.Call.Source, prefix)
		if why, ok := crowded[path]; ok {
			rejected = append(rejected, otlp.RejectedSpan{Path: path, Reason: why, Kind: string(metrics.RejectTooLong)})
			rc.rejected(src, metrics.RejectTooLong, 1)
			rc.logRejected("rejected_span", src, tenant, metrics.RejectTooLong, path+": "+why)
			continue
		}
		if err := tk.take(c, res.Known[i], res.Sources[i], path); err != nil {
			rejected = append(rejected, otlp.RejectedSpan{Path: path, Reason: strings.TrimPrefix(err.msg, path+": "), Kind: string(err.reason)})
			rc.rejected(src, err.reason, 1)
			rc.logRejected("rejected_span", src, tenant, err.reason, err.msg)
		}
	}
	tk.retained(func(path string, err *recordError) {
		rejected = append(rejected, otlp.RejectedSpan{Path: path, Reason: strings.TrimPrefix(err.msg, path+": "), Kind: string(err.reason)})
		rc.rejected(src, err.reason, 1)
		rc.logRejected("rejected_span", src, tenant, err.reason, err.msg)
	})
	if len(tk.recs) > 0 {
		if _, re := rc.ingest(ctx, src, tk.recs, tk.srcs); re != nil {
			return ptraceotlp.ExportResponse{}, re
		}
	}
	return partialSuccess(rejected), nil
}

// crowded returns the paths of the spans with more attributes, or under a
// resource with more, than the limit allows, and why.
func (rc *Receiver) crowded(td ptrace.Traces) map[string]string {
	var out map[string]string
	limit := rc.cfg.MaxAttributes
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		rn := rs.Resource().Attributes().Len()
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				why := ""
				if n := spans.At(k).Attributes().Len(); n > limit {
					why = fmt.Sprintf("%d attributes, more than the limit of %d (serve.receiver.max_attributes)", n, limit)
				} else if rn > limit {
					why = fmt.Sprintf("its resource has %d attributes, more than the limit of %d (serve.receiver.max_attributes)", rn, limit)
				}
				if why != "" {
					if out == nil {
						out = map[string]string{}
					}
					out[fmt.Sprintf("resourceSpans[%d].scopeSpans[%d].spans[%d]", i, j, k)] = why
				}
			}
		}
	}
	return out
}

// GRPC is the OTLP/gRPC trace service.
type GRPC struct {
	ptraceotlp.UnimplementedGRPCServer
	rc *Receiver
}

// Register registers the OTLP trace service on s. Its requests reach
// Export as they come on the wire (wireRequest): those otlp.CheckProto
// accepts are read from their bytes, the others decoded by pdata.
func (rc *Receiver) Register(s *grpc.Server) {
	s.RegisterService(&traceServiceDesc, &GRPC{rc: rc})
}

// exportMethod is the OTLP trace service's one method.
const exportMethod = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

// traceServiceDesc is pdata's OTLP trace service (ptraceotlp.RegisterGRPCServer)
// with a request type of ours, so that the codec may keep the message's
// bytes rather than decode it.
var traceServiceDesc = grpc.ServiceDesc{
	ServiceName: "opentelemetry.proto.collector.trace.v1.TraceService",
	HandlerType: (*wireExporter)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Export", Handler: exportHandler}},
	Streams:     []grpc.StreamDesc{},
	Metadata:    "opentelemetry/proto/collector/trace/v1/trace_service.proto",
}

// wireExporter serves Export requests as wireRequests.
type wireExporter interface {
	exportWire(ctx context.Context, in *wireRequest) (ptraceotlp.ExportResponse, error)
	refused(in *wireRequest, err error)
	slow() error
}

// messageTimer is the context key of the *bodyTimer that cuts a stream
// whose message has not arrived within the body timeout (tap).
type messageTimer struct{}

// bodyTimer cuts a stream whose message is late. It is paused while the
// codec decodes the message that arrived (the collector's own work, as
// reading and decompressing an HTTP body is not counted), and runs again
// while gRPC waits for the stream's end.
type bodyTimer struct {
	t *time.Timer
	d time.Duration
}

// errMessageTimeout is the cause of a stream cut by its messageTimer.
var errMessageTimeout = errors.New("the message did not arrive within the body timeout")

// messageContext is the context of a stream that its messageTimer may
// cut: cut, it says its deadline is exceeded, so that the sender is
// answered DeadlineExceeded (gRPC answers a stream whose message cannot
// be read with its context's error, before the handler can), not
// Canceled as if it had given up itself.
type messageContext struct{ context.Context }

func (c messageContext) Err() error {
	if errors.Is(context.Cause(c.Context), errMessageTimeout) {
		return context.DeadlineExceeded
	}
	return c.Context.Err()
}

// wireRequest is one Export request as depthCodec left it: the message
// when otlp.CheckProto accepted it (msg, in buf, given back by free), else
// pdata's decoding of it (req); bad are the spans a salvage emptied.
type wireRequest struct {
	buf  mem.Buffer
	msg  otlp.Message
	fast bool
	req  ptraceotlp.ExportRequest
	bad  []otlp.RejectedSpan
	// refused is set when the message cannot be taken at all (nested too
	// deep, or not decodable even without its broken spans), or not now
	// (the bytes in flight at their limit). The codec leaves it to
	// exportWire rather than failing: gRPC would answer a codec's error
	// with Internal, before the request is counted or logged as the same
	// request over HTTP is.
	refused *refusal
	// held is the request's share of the bytes in flight.
	held *holding
	// timer is the stream's body timer (nil outside a gRPC server).
	timer *bodyTimer
}

func (w *wireRequest) free() {
	if w.held != nil {
		w.held.release()
	}
	if w.buf != nil {
		w.buf.Free()
		w.buf, w.msg, w.fast = nil, otlp.Message{}, false
	}
}

func exportHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := &wireRequest{}
	g := srv.(wireExporter)
	// Freed however dec ends: gRPC reads on after the message of a unary
	// call, to see its stream end, and fails the call when the sender is
	// gone by then or sent a second message, after the codec took the
	// first one's bytes in flight.
	defer in.free()
	in.timer, _ = ctx.Value(messageTimer{}).(*bodyTimer)
	err := dec(in)
	if in.timer != nil {
		in.timer.t.Stop()
	}
	if errors.Is(context.Cause(ctx), errMessageTimeout) {
		// Cut before the message came, or while gRPC waited for the
		// stream's end after it: the request's context is done, so nothing
		// could be stored either way.
		err = g.slow()
	}
	if err != nil {
		g.refused(in, err)
		return nil, err
	}
	if interceptor == nil {
		return g.exportWire(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: exportMethod}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return g.exportWire(ctx, req.(*wireRequest))
	})
}

// ServerOptions are the options the gRPC server of the receiver needs: the
// message size limit, the streams per connection, and the tap that refuses
// a request before its message is read when the collector is near its
// memory limit or processes as many requests as it may.
func (rc *Receiver) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(rc.cfg.MaxBodyBytes)),
		grpc.MaxConcurrentStreams(uint32(rc.cfg.MaxConcurrentStreams)),
		grpc.InTapHandle(rc.tap),
		grpc.ForceServerCodecV2(rc.codec()),
		grpc.StatsHandler(oversized{rc}),
	}
}

// oversized counts and logs the Export requests gRPC refuses itself
// before any handler runs: a message over serve.receiver.max_body_bytes,
// plain or once decompressed, answered ResourceExhausted ("received
// message larger than max"). Over OTLP/HTTP such a request is a 413,
// counted as too_large and logged; over gRPC it was neither.
type oversized struct{ rc *Receiver }

func (oversized) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (oversized) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (oversized) HandleConn(context.Context, stats.ConnStats) {}

// HandleRPC sees the end of every RPC. The receiver's own refusals are
// Unavailable, InvalidArgument, Unauthenticated or PermissionDenied, so a
// ResourceExhausted end of Export is gRPC's size limit.
func (o oversized) HandleRPC(ctx context.Context, s stats.RPCStats) {
	end, ok := s.(*stats.End)
	if !ok || end.Client || end.Error == nil || status.Code(end.Error) != codes.ResourceExhausted {
		return
	}
	method, _ := grpc.Method(ctx)
	if method != exportMethod {
		return
	}
	// The tap authenticated the request before its message was read.
	md, _ := metadata.FromIncomingContext(ctx)
	p, err := o.rc.grpcPrincipal(ctx, method, md)
	if err != nil {
		return
	}
	tenant := p.Tenant
	msg := fmt.Sprintf("%s (serve.receiver.max_body_bytes)", status.Convert(end.Error).Message())
	o.rc.rejected(metrics.SourceOTLPGRPC, metrics.RejectTooLarge, 1)
	o.rc.logRejected("rejected_request", metrics.SourceOTLPGRPC, tenant, metrics.RejectTooLarge, msg)
}

// tap admits one gRPC request before its message is read: a request
// without a known credential is refused first, and counted nowhere.
func (rc *Receiver) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if _, err := rc.grpcPrincipal(ctx, info.FullMethodName, info.Header); err != nil {
		return ctx, err
	}
	if overMemory(rc.cfg.MemorySoftLimit) {
		rc.rejected(metrics.SourceOTLPGRPC, metrics.RejectOverloaded, 1)
		return ctx, status.Error(codes.Unavailable, "the collector is near its memory limit; retry later")
	}
	select {
	case rc.streams <- struct{}{}:
		// The stream's context ends with the stream, whatever happens to
		// it: the slot is given back then.
		context.AfterFunc(ctx, func() { <-rc.streams })
		// The slot is held from the stream's headers on: a stream whose
		// message does not arrive within the body timeout is cut (as an
		// HTTP body that slow is), or streams that never send would hold
		// every slot. The codec pauses the timer while it decodes the
		// message, and exportHandler stops it once the stream has ended.
		ctx, cut := context.WithCancelCause(ctx)
		t := &bodyTimer{t: time.AfterFunc(rc.cfg.BodyTimeout, func() { cut(errMessageTimeout) }), d: rc.cfg.BodyTimeout}
		return context.WithValue(messageContext{ctx}, messageTimer{}, t), nil
	default:
		rc.rejected(metrics.SourceOTLPGRPC, metrics.RejectOverloaded, 1)
		return ctx, status.Errorf(codes.Unavailable, "the collector processes %d gRPC requests, its limit (serve.receiver.max_concurrent_streams); retry later", cap(rc.streams))
	}
}

// Export implements the OTLP trace service. Status codes follow the OTLP
// specification: Unavailable (retryable) when the pipeline is full or the
// store is down, Unauthenticated for a missing or unknown credential,
// PermissionDenied for one that may not ingest or a tenant header naming
// another tenant, InvalidArgument for a request that cannot be taken.
func (g *GRPC) Export(ctx context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	return g.exportWire(ctx, &wireRequest{req: req})
}

// exportWire is Export of a request as the codec left it.
func (g *GRPC) exportWire(ctx context.Context, in *wireRequest) (ptraceotlp.ExportResponse, error) {
	rc := g.rc
	md, _ := metadata.FromIncomingContext(ctx)
	method, _ := grpc.Method(ctx)
	p, err := rc.grpcPrincipal(ctx, method, md)
	if err != nil {
		return ptraceotlp.ExportResponse{}, err
	}
	if re := in.refused; re != nil {
		rc.rejected(metrics.SourceOTLPGRPC, re.reason, 1)
		rc.logRejected(re.logKind(), metrics.SourceOTLPGRPC, p.Tenant, re.reason, re.msg)
		if re.retryable() {
			return ptraceotlp.ExportResponse{}, status.Error(codes.Unavailable, re.msg)
		}
		return ptraceotlp.ExportResponse{}, status.Error(codes.InvalidArgument, re.msg)
	}
	var resp ptraceotlp.ExportResponse
	var re *refusal
	if in.fast {
		resp, re = rc.exportWire(ctx, metrics.SourceOTLPGRPC, p.Tenant, in.msg, in.bad)
	} else {
		resp, re = rc.exportCtx(ctx, metrics.SourceOTLPGRPC, p.Tenant, in.req, in.bad)
	}
	if re != nil {
		rc.logRejected(re.logKind(), metrics.SourceOTLPGRPC, p.Tenant, re.reason, re.msg)
		if re.retryable() {
			return ptraceotlp.ExportResponse{}, status.Error(codes.Unavailable, re.msg)
		}
		return ptraceotlp.ExportResponse{}, status.Error(codes.InvalidArgument, re.msg)
	}
	return resp, nil
}

// refused counts and logs an Export request gRPC could not hand to the
// codec, as OTLP/HTTP counts its refusals: decode_error for one it could
// not decompress or that was cut short (Internal). The codec's own
// refusals (values nested too deep, bytes pdata cannot decode) are
// answered by exportWire, and a message over serve.receiver.max_body_bytes
// (ResourceExhausted) is counted by oversized, which sees it whether gRPC
// refuses it before the handler or in its decode. A request whose sender
// went away (Canceled, DeadlineExceeded) is not a refusal.
func (g *GRPC) refused(_ *wireRequest, err error) {
	if status.Code(err) != codes.Internal {
		return
	}
	g.rc.rejected(metrics.SourceOTLPGRPC, metrics.RejectDecodeError, 1)
	g.rc.logRejected("rejected_request", metrics.SourceOTLPGRPC, "", metrics.RejectDecodeError, status.Convert(err).Message())
}

// slow counts and logs a request whose message did not arrive within the
// body timeout, as OTLP/HTTP counts a body that slow (408), and returns
// its answer.
func (g *GRPC) slow() error {
	msg := fmt.Sprintf("the message did not arrive within %s (serve.receiver.body_timeout)", g.rc.cfg.BodyTimeout)
	g.rc.rejected(metrics.SourceOTLPGRPC, metrics.RejectTimeout, 1)
	g.rc.logRejected("rejected_request", metrics.SourceOTLPGRPC, "", metrics.RejectTimeout, msg)
	return status.Error(codes.DeadlineExceeded, msg)
}

// grpcPrincipal authenticates a gRPC request by its metadata and its
// verified client certificate; the error is the status to answer. method
// is the full method name, logged as the path of a refused request.
func (rc *Receiver) grpcPrincipal(ctx context.Context, method string, md metadata.MD) (access.Principal, error) {
	authz := ""
	if v := md.Get("authorization"); len(v) > 0 {
		authz = v[0]
	}
	var verified [][]*x509.Certificate
	remote := ""
	if pr, ok := peer.FromContext(ctx); ok {
		if pr.Addr != nil {
			remote = pr.Addr.String()
		}
		if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok {
			verified = ti.State.VerifiedChains
		}
	}
	p, ok := rc.auth().Authenticate(authz, verified)
	if why := access.Repeated(md.Get("authorization")); why != "" && rc.auth().On() {
		rc.rlog.Warn("auth_failure", "OTLP/gRPC request refused: "+why, "remote", remote, "path", method)
		return access.Principal{}, status.Error(codes.Unauthenticated, why)
	}
	if !ok {
		rc.rlog.Warn("auth_failure", "OTLP/gRPC request refused: missing or unknown credential",
			"remote", remote, "path", method, "has_authorization", authz != "")
		return p, status.Error(codes.Unauthenticated, "missing or unknown bearer token")
	}
	if !p.Can(access.ScopeIngest) {
		return p, status.Error(codes.PermissionDenied, "credential "+p.Name+" may not send calls (no ingest scope)")
	}
	if p.Authenticated && p.Tenant != "" {
		for _, h := range access.TenantHeaders {
			if v := md.Get(h); len(v) > 0 && v[0] != "" && v[0] != p.Tenant {
				return p, status.Error(codes.PermissionDenied,
					(&access.ConflictError{Where: "header " + h, Tenant: v[0], Credential: p.Tenant}).Error())
			}
		}
	}
	return p, nil
}

// depthCodec checks the nesting of an OTLP message on the wire before the
// proto codec decodes it: a deep value costs many times its size once
// decoded. A request it cannot take is marked (wireRequest.refused) and
// answered by exportWire with InvalidArgument (Unavailable when the bytes
// in flight are at their limit), counted and logged.
//
// An Export request (wireRequest) is kept as its bytes when
// otlp.CheckProto accepts them with the attribute limit maxAttrs, and
// decoded by pdata otherwise, which also answers its errors as before.
type depthCodec struct {
	encoding.CodecV2
	limit    int
	maxAttrs int
	// inflight is the receiver's bytes in flight: an Export request holds
	// decodeCost times its message's bytes of it until it is answered, as
	// an OTLP/HTTP request does, and one that would pass it is refused
	// (Unavailable) before it is decoded. Nil: not counted.
	inflight *budget
}

// codec returns the gRPC codec of rc's Export requests.
func (rc *Receiver) codec() depthCodec {
	return depthCodec{CodecV2: encoding.GetCodecV2("proto"), limit: rc.cfg.MaxDepth, maxAttrs: rc.cfg.MaxAttributes, inflight: rc.inflight}
}

// Marshal encodes the Export response, which is pdata's.
func (c depthCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(ptraceotlp.ExportResponse); ok {
		b, err := r.MarshalProto()
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.CodecV2.Marshal(v)
}

func (c depthCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if w, ok := v.(*wireRequest); ok {
		// A second message of a unary call is decoded into the request
		// of the first before gRPC refuses the call.
		w.free()
		// The message has arrived: decoding it (waiting for the salvage
		// slot included) is the collector's time, not the sender's.
		if w.timer != nil && w.timer.t.Stop() {
			defer w.timer.t.Reset(w.timer.d)
		}
		// gRPC has read the whole message by now (max_concurrent_streams
		// of them at most, each up to max_body_bytes): what is bounded here
		// is what decoding and processing it costs, as for OTLP/HTTP.
		if c.inflight != nil {
			w.held = &holding{b: c.inflight}
			if !w.held.take(int64(data.Len()) * decodeCost) {
				w.refused = newRefusal(429, fmt.Sprintf("the collector holds %d bytes of requests in flight, its limit (serve.receiver.max_in_flight_bytes); retry later", c.inflight.Used()), metrics.RejectOverloaded)
				return nil
			}
		}
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		b := buf.ReadOnlyData()
		var deep *refusal
		if err := protoValueDepth(b, c.limit); err != nil {
			deep = newRefusal(400, "cannot take OTLP protobuf: "+err.Error(), metrics.RejectTooDeep)
			// The spans that hold values nested too deep are emptied
			// (salvageDeepProto); the rest is read from a copy. The
			// codec has no context: the wait for the salvage slot is
			// bounded by the streams a connection may hold
			// (max_concurrent_streams).
			wire, bad, ok := salvageDeep(context.Background(), b, c.limit)
			buf.Free()
			if !ok {
				w.refused = deep
				return nil
			}
			buf, b, w.bad = mem.SliceBuffer(wire), wire, bad
		}
		if m, ok := otlp.CheckProto(b, c.maxAttrs); ok {
			w.buf, w.msg, w.fast = buf, m, true
			return nil
		}
		defer buf.Free()
		w.req = ptraceotlp.NewExportRequest()
		err := w.req.UnmarshalProto(b)
		if err != nil {
			req, bad, re := undecoded(context.Background(), b, true, deep, err)
			if re != nil {
				w.refused = re
				return nil
			}
			w.req, w.bad = req, append(w.bad, bad...)
		}
		return nil
	}
	m, ok := v.(interface{ UnmarshalProto([]byte) error })
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	// The message arrives in frames: it is joined once, checked and
	// decoded from the same bytes, as pdata's own codec would decode it
	// (pdata copies what it keeps, so the pooled buffer can go back).
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	if err := protoValueDepth(buf.ReadOnlyData(), c.limit); err != nil {
		return fmt.Errorf("cannot take OTLP protobuf: %w", err)
	}
	return m.UnmarshalProto(buf.ReadOnlyData())
}
