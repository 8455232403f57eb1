package receiver

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestSpanFrameFault_Offsets: a span's fault is named at its byte offset
// in the body when the body is as sent and the span a slice of it, and
// in the span otherwise (a body rebuilt without deep spans, whose offsets
// would name no place in the body sent).
func TestSpanFrameFault_Offsets(t *testing.T) {
	span := protowire.AppendTag(nil, 5, protowire.VarintType)
	span = protowire.AppendVarint(span, 1)
	span = protowire.AppendTag(span, 20, 7)
	body := append([]byte{0x0a, 0x0b, 0x12, 0x09, 0x12, byte(len(span))}, span...)
	in := body[6:]
	for _, c := range []struct {
		body, span []byte
		sent       bool
		want       string
	}{
		{body, in, true, "invalid wire type 7 at byte offset 8 of the body, in the tag of field 20, inside the span"},
		{body, in, false, "invalid wire type 7 at byte offset 2 of the span, in the tag of field 20, inside the span"},
		{body, bytes.Clone(in), true, "invalid wire type 7 at byte offset 2 of the span, in the tag of field 20, inside the span"},
	} {
		if got := spanFrameFault(c.body, c.span, c.sent); got != c.want {
			t.Errorf("sent %v: %q, want %q", c.sent, got, c.want)
		}
	}
}
