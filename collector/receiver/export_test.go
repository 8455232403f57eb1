package receiver

import (
	"context"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// GRPCServer returns the OTLP trace service of rc, for benchmarks that
// call Export without a gRPC server.
func (rc *Receiver) GRPCServer() *GRPC { return &GRPC{rc: rc} }

// ExportMessage serves one OTLP/gRPC Export message as the gRPC server
// does, from the codec on, without a connection.
func (rc *Receiver) ExportMessage(ctx context.Context, msg []byte) error {
	codec := depthCodec{CodecV2: encoding.GetCodecV2("proto"), limit: rc.cfg.MaxDepth, maxAttrs: rc.cfg.MaxAttributes}
	dec := func(v any) error { return codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(msg)}, v) }
	_, err := exportHandler(&GRPC{rc: rc}, ctx, dec, nil)
	return err
}
