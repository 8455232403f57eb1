package receiver

import (
	"io"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
)

// FuzzProtoFault: no body makes protoFault panic or walk without end, and
// a break it finds is within the body: its message ends at or before the
// body's end, and a cut-short body is said to end where it does.
func FuzzProtoFault(f *testing.F) {
	req := ptrace.NewTraces()
	sp := req.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName("tools/call")
	sp.Attributes().PutEmptySlice("a").AppendEmpty().SetEmptyMap().PutStr("k", "v")
	sp.Events().AppendEmpty().Attributes().PutStr("e", "v")
	pb, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(req)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pb)
	f.Add(pb[:len(pb)/2])
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		fb, ok := pbFrame(b, 0, len(b), pbRequest, 0)
		if ok && (fb.end < 0 || fb.end > len(b) || fb.where == "") {
			t.Fatalf("pbFrame(% x) = %+v: a break outside the body", b, fb)
		}
		msg := protoFault(b, io.ErrUnexpectedEOF)
		if !strings.HasPrefix(msg, io.ErrUnexpectedEOF.Error()) {
			t.Fatalf("protoFault(% x) = %q: pdata's message lost", b, msg)
		}
	})
}
