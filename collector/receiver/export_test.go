package receiver

import (
	"context"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc/mem"

	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// GRPCServer returns the OTLP trace service of rc, for benchmarks that
// call Export without a gRPC server.
func (rc *Receiver) GRPCServer() *GRPC { return &GRPC{rc: rc} }

// ExportMessage serves one OTLP/gRPC Export message as the gRPC server
// does, from the codec on, without a connection.
func (rc *Receiver) ExportMessage(ctx context.Context, msg []byte) error {
	codec := rc.codec()
	dec := func(v any) error { return codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(msg)}, v) }
	_, err := exportHandler(&GRPC{rc: rc}, ctx, dec, nil)
	return err
}

// HoldInFlight takes n bytes of rc's bytes in flight, as a request being
// read would, until release is called.
func (rc *Receiver) HoldInFlight(n int64) (release func(), ok bool) {
	if !rc.inflight.take(n) {
		return nil, false
	}
	return func() { rc.inflight.give(n) }, true
}

// ExportRejected answers, over OTLP/HTTP, a request of no spans for
// tenant whose spans pre were rejected before it was read, as the spans
// a salvage empties are; refused reports a refusal of the request.
func (rc *Receiver) ExportRejected(ctx context.Context, tenant string, pre []otlp.RejectedSpan) (resp ptraceotlp.ExportResponse, refused bool) {
	resp, re := rc.exportCtx(ctx, metrics.SourceOTLPHTTP, tenant, ptraceotlp.NewExportRequest(), pre)
	return resp, re != nil
}

// SpanReason is spanReason, for the reason tests.
var SpanReason = spanReason

// HoldSalvageSlot takes the slot that lets one salvage run at a time, as
// a salvage of another request would, until release is called.
func HoldSalvageSlot() (release func()) {
	salvageSlot <- struct{}{}
	return func() { <-salvageSlot }
}

// StoreRefused is storeRefused, for the tests of package receiver_test.
var StoreRefused = storeRefused
