package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/exporter/store"
)

// decodeAll reads every call of a capture, as the carriers make them.
func decodeAll(t *testing.T, name string, data string) []*audit.Call {
	t.Helper()
	d, err := capture.NewDecoder(bytes.NewReader([]byte(data)), name)
	if err != nil {
		t.Fatal(err)
	}
	rd := dialect.NewReader(dialect.Config{})
	var out []*audit.Call
	for {
		r, err := d.NextRecord(rd)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Call)
	}
}

// TestStoredResponse: a span is told from a call record by the source the
// OTLP reader gives it; the same response sums alike on both carriers and
// on the carrier's own sum's terms (known where audit.Call.RespSum is).
func TestStoredResponse(t *testing.T) {
	const span = `{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"%s","name":"tools/call gram_projects","kind":2,"startTimeUnixNano":"1793610005385999872","endTimeUnixNano":"1793610005485999872","attributes":[{"key":"mcp.method.name","value":{"stringValue":"tools/call"}},{"key":"gen_ai.tool.name","value":{"stringValue":"gram_projects"}},{"key":"mcp.session.id","value":{"stringValue":"s1"}},{"key":"jsonrpc.request.id","value":{"stringValue":"7"}}%s]}`
	attr := `,{"key":"gen_ai.tool.call.result","value":{"stringValue":"{\"structuredContent\":{\"projects\":[]},\"isError\":false}"}}`
	otlp := `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"thegram"}}]},"scopeSpans":[{"spans":[` +
		fmt.Sprintf(span, "0102030405060708", attr) + `,` + fmt.Sprintf(span, "0102030405060709", "") + `]}]}]}`
	spans := decodeAll(t, "traces.json", otlp)
	records := decodeAll(t, "calls.ndjson",
		`{"time":"2026-11-02T09:00:05.385999872Z","server":"thegram","session":"s1","request":{"id":7,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"response":{"id":7,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"projects":[]}}}}`+"\n"+
			`{"time":"2026-11-02T09:00:05.385999872Z","server":"thegram","session":"s1","request":{"id":7,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"response":{"id":7,"jsonrpc":"2.0","error":{"code":-32603,"message":"internal"}}}`+"\n")
	if len(spans) != 2 || len(records) != 2 {
		t.Fatalf("decoded %d spans and %d records, want 2 and 2", len(spans), len(records))
	}
	for _, c := range spans {
		if !store.FromSpan(c) {
			t.Errorf("the span of source %q is not told a span", c.Source)
		}
	}
	for _, c := range records {
		if store.FromSpan(c) {
			t.Errorf("the call record of source %q is told a span", c.Source)
		}
	}
	for i, c := range append(spans, records...) {
		if _, known := store.StoredResponse(c); known != (c.RespSum != 0) {
			t.Errorf("call %d (%s): known %v, but its carrier's sum is %d", i, c.Source, known, c.RespSum)
		}
	}
	spanSum, _ := store.StoredResponse(spans[0])
	recSum, _ := store.StoredResponse(records[0])
	errSum, _ := store.StoredResponse(records[1])
	if spanSum != recSum {
		t.Errorf("one response sums %x on a span and %x in a call record", spanSum, recSum)
	}
	if errSum == recSum {
		t.Errorf("an error sums as a result does")
	}
}

// TestFromSpan: a span's call is told from a call record's by the sender
// serve stores it under, and by the place a call stored before, or read of
// a file, names.
func TestFromSpan(t *testing.T) {
	f := func(source string, want bool) {
		t.Helper()
		if got := store.FromSpan(&audit.Call{Source: source}); got != want {
			t.Errorf("FromSpan(%q) = %v, want %v", source, got, want)
		}
	}
	f("otlp:thegram/pod-b/node-2", true)
	f("otlp:thegram", true)
	f("otlp_grpc:resourceSpans[0].scopeSpans[0].spans[3]", true)
	f("capture.json:resourceSpans[1].scopeSpans[0].spans[0]", true)
	f("calls:proxy/thegram/host:8080", false)
	f("calls:10.0.0.7", false)
	f("wrap/thegram/host", false)
	f("body:3", false)
	f("capture.ndjson:12", false)
	f("", false)
}
