package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// spanRef is one span an exporter sent, with what the harness matches a
// stored call by.
type spanRef struct {
	Provider string `json:"provider"`
	Server   string `json:"server"`
	Session  string `json:"session"`
	Tool     string `json:"tool"`
	TimeMS   int64  `json:"time_ms"`
	TraceID  string `json:"trace_id"`
	SpanID   string `json:"span_id"`
	Err      string `json:"err,omitempty"`
}

// ackExporter counts a span acknowledged when the SDK exporter returned nil
// for its batch, and failed otherwise.
type ackExporter struct {
	sdktrace.SpanExporter
	name      string
	mu        sync.Mutex
	acked     []spanRef
	failed    []spanRef
	batches   atomic.Int64
	errBatchs atomic.Int64
}

func (e *ackExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	e.batches.Add(1)
	refs := make([]spanRef, 0, len(spans))
	for _, s := range spans {
		r := spanRef{Provider: e.name, TimeMS: s.StartTime().UnixMilli(), TraceID: s.SpanContext().TraceID().String(), SpanID: s.SpanContext().SpanID().String()}
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "server.address":
				r.Server = kv.Value.AsString()
			case "mcp.session.id":
				r.Session = kv.Value.AsString()
			case "gen_ai.tool.name":
				r.Tool = kv.Value.AsString()
			}
		}
		if err != nil {
			r.Err = err.Error()
		}
		refs = append(refs, r)
	}
	e.mu.Lock()
	if err != nil {
		e.errBatchs.Add(1)
		e.failed = append(e.failed, refs...)
	} else {
		e.acked = append(e.acked, refs...)
	}
	e.mu.Unlock()
	return err
}

// provider is one TracerProvider with its exporter and clock skew.
type provider struct {
	tp   *sdktrace.TracerProvider
	exp  *ackExporter
	skew time.Duration
	name string
}

// newProviders starts the three TracerProviders of one server: OTLP/gRPC
// with a 1 s batch, OTLP/HTTP (protobuf) with a 1 s batch, and a lagging
// OTLP/HTTP one (lagBatch) whose clock is off by skew.
func newProviders(ctx context.Context, server, grpcAddr, httpAddr string, lagBatch, skew time.Duration) ([]*provider, error) {
	mk := func(kind string, batch, sk time.Duration) (*provider, error) {
		var inner sdktrace.SpanExporter
		var err error
		if kind == "grpc" {
			inner, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(grpcAddr), otlptracegrpc.WithInsecure())
		} else {
			inner, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(httpAddr), otlptracehttp.WithInsecure())
		}
		if err != nil {
			return nil, fmt.Errorf("cannot start the %s exporter: %w", kind, err)
		}
		name := server + "/" + kind
		exp := &ackExporter{SpanExporter: inner, name: name}
		res := resource.NewSchemaless(attribute.String("service.name", "outside-agents"),
			attribute.String("service.instance.id", name), attribute.String("host.name", "out48"))
		tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res),
			sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(batch), sdktrace.WithBlocking()))
		return &provider{tp: tp, exp: exp, skew: sk, name: name}, nil
	}
	var ps []*provider
	for _, k := range []struct {
		kind  string
		batch time.Duration
		skew  time.Duration
		tag   string
	}{{"grpc", time.Second, 0, ""}, {"http", time.Second, 0, ""}, {"http", lagBatch, skew, "lag"}} {
		p, err := mk(k.kind, k.batch, k.skew)
		if err != nil {
			return nil, err
		}
		if k.tag != "" {
			p.exp.name += "-" + k.tag
			p.name = p.exp.name
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// instrument adds CLIENT spans per the OpenTelemetry MCP semantic
// conventions (with the opt-in arguments and result) to a client's
// tools/call requests.
func instrument(c *mcp.Client, p *provider, server, session string) {
	tracer := p.tp.Tracer("outside-agent")
	var rpcID atomic.Int64
	c.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			params, ok := req.GetParams().(*mcp.CallToolParams)
			if method != "tools/call" || !ok {
				return next(ctx, method, req)
			}
			args, _ := json.Marshal(params.Arguments)
			id := rpcID.Add(1)
			start := time.Now().Add(p.skew)
			_, span := tracer.Start(ctx, "tools/call "+params.Name, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start),
				trace.WithAttributes(attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", params.Name),
					attribute.String("gen_ai.operation.name", "execute_tool"), attribute.String("jsonrpc.request.id", fmt.Sprint(id)),
					attribute.String("mcp.session.id", session), attribute.String("server.address", server),
					attribute.String("gen_ai.tool.call.arguments", string(args))))
			res, err := next(ctx, method, req)
			var werr *jsonrpc.Error
			switch {
			case err != nil && (errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "deadline exceeded")):
				span.SetAttributes(attribute.String("error.type", "timeout"))
				span.SetStatus(codes.Error, "timeout")
			case err != nil && errors.As(err, &werr):
				et := fmt.Sprint(werr.Code)
				var data struct{ Code string }
				if json.Unmarshal(werr.Data, &data) == nil && data.Code != "" {
					et = data.Code
				}
				span.SetAttributes(attribute.String("error.type", et), attribute.Int64("rpc.response.status_code", werr.Code),
					attribute.String("rpc.jsonrpc.error_message", werr.Message))
				span.SetStatus(codes.Error, werr.Message)
			case err != nil:
				span.SetAttributes(attribute.String("error.type", "_OTHER"))
				span.SetStatus(codes.Error, err.Error())
			default:
				b, _ := json.Marshal(res)
				span.SetAttributes(attribute.String("gen_ai.tool.call.result", string(b)))
				if r, ok := res.(*mcp.CallToolResult); ok && r.IsError {
					span.SetAttributes(attribute.String("error.type", "tool_error"))
					span.SetStatus(codes.Error, "tool_error")
				}
			}
			span.End(trace.WithTimestamp(time.Now().Add(p.skew)))
			return res, err
		}
	})
}
