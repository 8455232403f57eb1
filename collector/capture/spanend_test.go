package capture

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/mcpaudit/mcpaudit/collector/otlp"
)

// TestDecoder_SpanEndsBeforeStart: in an OTLP JSON file (analyze), a span
// that ends before it starts is rejected alone, counted as a bad time
// (RejectedSpan.Kind), as the receiver rejects it; the other spans are
// read.
func TestDecoder_SpanEndsBeforeStart(t *testing.T) {
	in, err := os.ReadFile("../../testdata/examples/thegram-normal-edit.otlp.json")
	if err != nil {
		t.Fatal(err)
	}
	whole, rejects, _ := decodeAll(t, in)
	if len(rejects) != 0 || whole < 2 {
		t.Fatalf("the example: %d calls, rejects %v", whole, rejects)
	}
	bad := bytes.Replace(in, []byte(`"endTimeUnixNano": "1793610008998999936"`), []byte(`"endTimeUnixNano": "1793610008000000000"`), 1)
	n, rejects, _ := decodeAll(t, bad)
	if n != whole-1 || len(rejects) != 1 {
		t.Fatalf("%d calls, rejects %v; want %d and one", n, rejects, whole-1)
	}
	var se *SpanError
	const want = "in: resourceSpans[0].scopeSpans[0].spans[0]: field end_time_unix_nano: the span ends 576.999936ms before it starts (start_time_unix_nano)"
	if !errors.As(rejects[0], &se) || se.Kind != otlp.KindBadTime || rejects[0].Error() != want {
		t.Errorf("reject %q (%+v), want %q of kind bad_time", rejects[0], se, want)
	}
}
