package receiver

import (
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// salvageSeed is a request of three spans, as protobuf and as JSON.
func salvageSeed() (pb, js []byte) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	for i := range 3 {
		sp := ss.Spans().AppendEmpty()
		sp.SetSpanID(pcommon.SpanID{1, byte(i)})
		sp.SetTraceID(pcommon.TraceID{2, byte(i)})
		sp.Attributes().PutStr("gen_ai.tool.name", "gram_read")
	}
	req := ptraceotlp.NewExportRequestFromTraces(td)
	pb, _ = req.MarshalProto()
	js, _ = req.MarshalJSON()
	return pb, js
}

// FuzzSalvage: the salvage of any input does not panic, and what it
// salvages decodes, with as many spans as the input had.
func FuzzSalvage(f *testing.F) {
	pb, js := salvageSeed()
	f.Add(pb, false)
	f.Add(js, true)
	f.Add(deepSeed(), false)
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"spanId":"ab"},{"traceId":"00"},{}]}]}]}`), true)
	f.Fuzz(func(t *testing.T, b []byte, asJSON bool) {
		var s salvaged
		var ok bool
		req := ptraceotlp.NewExportRequest()
		if asJSON {
			if s, ok = salvageJSON(b); ok && req.UnmarshalJSON(s.b) != nil {
				t.Fatal("salvaged JSON does not decode")
			}
		} else {
			if s, ok = salvageProto(b); ok && req.UnmarshalProto(s.b) != nil {
				t.Fatal("salvaged protobuf does not decode")
			}
		}
		if ok && len(s.bad) == 0 {
			t.Fatal("salvaged with no span to blame")
		}
		if asJSON {
			return
		}
		// A request refused for a value nested too deep (the limit is
		// 2 here, so that the fuzzer reaches it) is rebuilt with as many
		// spans, none too deep, and decodes unless another fault is left
		// to salvageProto.
		const limit = 2
		if protoValueDepth(b, limit) == nil {
			return
		}
		out, bad, ok := salvageDeepProto(b, limit)
		if !ok {
			return
		}
		if len(bad) == 0 {
			t.Fatal("salvaged a deep request with no span to blame")
		}
		if protoValueDepth(out, limit) != nil {
			t.Fatal("the rebuilt request still nests too deep")
		}
		if n, m := countProtoSpans(out), countProtoSpans(b); n != m {
			t.Fatalf("rebuilt with %d spans, want the %d of the request", n, m)
		}
		if req.UnmarshalProto(out) != nil {
			if _, ok := salvageProto(out); !ok && req.UnmarshalProto(b) == nil {
				t.Fatal("a request that decoded does not once rebuilt")
			}
		}
	})
}

// deepSeed is salvageSeed's protobuf with span 1 nested 4 deep, its
// resource's second copy 3 deep.
func deepSeed() []byte {
	td := ptrace.NewTraces()
	for r := range 2 {
		rs := td.ResourceSpans().AppendEmpty()
		if r == 1 {
			nest(rs.Resource().Attributes(), 3)
		}
		ss := rs.ScopeSpans().AppendEmpty()
		for i := range 3 {
			sp := ss.Spans().AppendEmpty()
			sp.SetSpanID(pcommon.SpanID{1, byte(i)})
			sp.SetTraceID(pcommon.TraceID{2, byte(i)})
			sp.Attributes().PutStr("gen_ai.tool.name", "gram_read")
			if i == 1 {
				nest(sp.Attributes(), 4)
			}
		}
	}
	b, _ := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	return b
}

func nest(m pcommon.Map, depth int) {
	v := m.PutEmptySlice("deep")
	for range depth {
		v = v.AppendEmpty().SetEmptySlice()
	}
}

// BenchmarkSalvageJSON measures the salvage of an OTLP JSON body of tiny
// spans, the worst case for its memory (a tree node per few bytes), with
// one broken span at the end: go test -run '^$' -bench SalvageJSON
// -benchmem ./collector/receiver/ (bytes allocated per op against the
// body's size, SetBytes).
func BenchmarkSalvageJSON(b *testing.B) {
	var body []byte
	body = append(body, `{"resourceSpans":[{"scopeSpans":[{"spans":[`...)
	for i := range 130_000 {
		body = fmt.Appendf(body, `{"spanId":"%016x"},`, i)
	}
	body = append(body, `{"spanId":"ab"}]}]}]}`...)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, ok := salvageJSON(body); !ok {
			b.Fatal("not salvaged")
		}
	}
}
