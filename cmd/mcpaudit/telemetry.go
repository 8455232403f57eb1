package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/internal/version"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// tracer traces mcpaudit's own pipeline. It is a no-op unless
// setupTelemetry installed an SDK tracer provider.
func tracer() trace.Tracer { return otel.Tracer("github.com/mcpaudit/mcpaudit") }

// setupTelemetry installs an OTLP trace exporter when the standard
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// variables are set; the exporter reads the rest of the OTEL_* variables
// itself. The protocol follows OTEL_EXPORTER_OTLP_PROTOCOL (grpc or
// http/protobuf, the default).
func setupTelemetry(ctx context.Context, log *slog.Logger) (func(context.Context) error, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, err
	}
	res, _ := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName("mcpaudit"), semconv.ServiceVersion(version.Get().Version)))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	log.Info("self-telemetry on: tracing the pipeline over OTLP", "protocol", proto)
	return tp.Shutdown, nil
}

// tracedIngester traces each ingest request.
type tracedIngester struct {
	in receiver.Ingester
}

func (t tracedIngester) Ingest(ctx context.Context, batches ...audit.Batch) (int, error) {
	n := 0
	for _, b := range batches {
		n += len(b.Records)
	}
	ctx, span := tracer().Start(ctx, "mcpaudit.ingest", trace.WithAttributes(attribute.Int("mcpaudit.calls", n)))
	defer span.End()
	stored, err := t.in.Ingest(ctx, batches...)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return stored, err
}

// tracedStore traces the store's commits and times them for
// mcpaudit_store_commit_seconds.
type tracedStore struct {
	audit.Store
	m *metrics.Metrics
}

// appendCalls runs one append of n calls (f) in a span and times it for
// mcpaudit_store_commit_seconds, whichever of the store's appends f calls.
func (t tracedStore) appendCalls(ctx context.Context, n int, f func(context.Context) error) error {
	ctx, span := tracer().Start(ctx, "mcpaudit.store.append_calls", trace.WithAttributes(attribute.Int("mcpaudit.calls", n)))
	defer span.End()
	start := time.Now()
	err := f(ctx)
	t.m.ObserveStoreCommit(time.Since(start))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

func (t tracedStore) AppendCalls(ctx context.Context, calls []audit.Record) (n int, err error) {
	err = t.appendCalls(ctx, len(calls), func(ctx context.Context) error {
		n, err = t.Store.AppendCalls(ctx, calls)
		return err
	})
	return n, err
}

// traced wraps st for serve's pipeline, passing on the store's comparison
// of responses when it makes one (audit.ResponseComparer: the embedded
// store). A store that does not compare must not seem to: the pipeline
// takes a comparer's report of the calls it held as complete.
func traced(st audit.Store, m *metrics.Metrics) audit.Store {
	t := tracedStore{st, m}
	if a, ok := st.(audit.AnswerReporter); ok {
		return tracedAnswerer{tracedComparer{t, a}, a}
	}
	if c, ok := st.(audit.ResponseComparer); ok {
		return tracedComparer{t, c}
	}
	return t
}

// tracedAnswerer is a tracedComparer whose store also tells which held
// calls may carry an answer the stored call lacked (audit.AnswerReporter).
type tracedAnswerer struct {
	tracedComparer
	a audit.AnswerReporter
}

// AppendCallsAnswered passes on the store's report of the calls it held
// and of those that may complete the stored call.
func (t tracedAnswerer) AppendCallsAnswered(ctx context.Context, calls []audit.Record) (n int, held, differ, answered []int, err error) {
	err = t.appendCalls(ctx, len(calls), func(ctx context.Context) error {
		n, held, differ, answered, err = t.a.AppendCallsAnswered(ctx, calls)
		return err
	})
	return n, held, differ, answered, err
}

// tracedComparer is a tracedStore whose store compares responses.
type tracedComparer struct {
	tracedStore
	c audit.ResponseComparer
}

// AppendCallsCompared passes on the store's comparison of the responses
// of calls skipped as stored.
func (t tracedComparer) AppendCallsCompared(ctx context.Context, calls []audit.Record) (n int, held, differ []int, err error) {
	err = t.appendCalls(ctx, len(calls), func(ctx context.Context) error {
		n, held, differ, err = t.c.AppendCallsCompared(ctx, calls)
		return err
	})
	return n, held, differ, err
}

func (t tracedStore) Commit(ctx context.Context, r audit.Results) error {
	ctx, span := tracer().Start(ctx, "mcpaudit.store.commit_results", trace.WithAttributes(
		attribute.Int("mcpaudit.writes", len(r.Writes)), attribute.Int("mcpaudit.findings", len(r.Findings))))
	defer span.End()
	err := t.Store.Commit(ctx, r)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// Ready passes on the store's readiness, when it tells it (ClickHouse):
// the pipeline waits for it at start.
func (t tracedStore) Ready() error {
	if rd, ok := t.Store.(interface{ Ready() error }); ok {
		return rd.Ready()
	}
	return nil
}
