package otlp

import (
	"fmt"

	"go.opentelemetry.io/collector/pdata/ptrace"
)

// DecodeJSON decodes one OTLP JSON document (an ExportTraceServiceRequest
// with resourceSpans) with pdata's unmarshaler.
func DecodeJSON(b []byte) (ptrace.Traces, error) {
	var u ptrace.JSONUnmarshaler
	td, err := u.UnmarshalTraces(b)
	if err != nil {
		return ptrace.Traces{}, fmt.Errorf("cannot decode OTLP JSON: %w", err)
	}
	return td, nil
}

// DecodeProto decodes one OTLP protobuf ExportTraceServiceRequest.
func DecodeProto(b []byte) (ptrace.Traces, error) {
	var u ptrace.ProtoUnmarshaler
	td, err := u.UnmarshalTraces(b)
	if err != nil {
		return ptrace.Traces{}, fmt.Errorf("cannot decode OTLP protobuf: %w", err)
	}
	return td, nil
}
