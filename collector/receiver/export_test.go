package receiver

// GRPCServer returns the OTLP trace service of rc, for benchmarks that
// call Export without a gRPC server.
func (rc *Receiver) GRPCServer() *GRPC { return &GRPC{rc: rc} }
