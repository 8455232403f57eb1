package receiver

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fastjson"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/mcpaudit/mcpaudit/exporter/metrics"
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
	f.Add(deepSeedJSON(), true)
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"spanId":"ab"},{"traceId":"00"},{}]}]}]}`), true)
	f.Fuzz(func(t *testing.T, b []byte, asJSON bool) {
		var s salvaged
		var ok bool
		req := ptraceotlp.NewExportRequest()
		if asJSON {
			if s, ok = salvageJSON(b); ok && req.UnmarshalJSON(s.b) != nil {
				t.Fatal("salvaged JSON does not decode")
			}
			// The walk that bodies over 4 MiB take, on every input.
			if ws, wok := salvageStreamJSON(b); wok {
				if len(ws.bad) == 0 {
					t.Fatal("walked and salvaged with no span to blame")
				}
				if err := ptraceotlp.NewExportRequest().UnmarshalJSON(ws.b); err != nil {
					t.Fatalf("JSON salvaged by the walk does not decode: %v", err)
				}
				// Both empty spans in place, none taken out. The walk may
				// salvage what the tree cannot (a span that is not JSON,
				// such as {{}}, walked over and replaced): compared only
				// when both did.
				if ok {
					if n, m := ws.req.Traces().SpanCount(), s.req.Traces().SpanCount(); n != m {
						t.Fatalf("the walk salvaged %d spans, the tree %d", n, m)
					}
				}
			}
		} else {
			if s, ok = salvageProto(b, true); ok && req.UnmarshalProto(s.b) != nil {
				t.Fatal("salvaged protobuf does not decode")
			}
		}
		if ok && len(s.bad) == 0 {
			t.Fatal("salvaged with no span to blame")
		}
		if asJSON {
			// As below, over JSON (the limit 12 lets an attribute value
			// of OTLP JSON nest one array).
			const limit = 12
			if d, _, _ := jsonScan(b, limit); d <= limit {
				return
			}
			out, bad, ok := salvageDeepJSON(b, limit)
			if !ok {
				return
			}
			if len(bad) == 0 {
				t.Fatal("salvaged a deep request with no span to blame")
			}
			if d, _, _ := jsonScan(out, limit); d > limit {
				t.Fatal("the rebuilt request still nests too deep")
			}
			in, rebuilt := ptraceotlp.NewExportRequest(), ptraceotlp.NewExportRequest()
			if in.UnmarshalJSON(b) == nil {
				if err := rebuilt.UnmarshalJSON(out); err != nil {
					t.Fatalf("a request that decoded does not once rebuilt: %v\n%s", err, out)
				}
			}
			// Spans are emptied in place, none taken out. (Counted as
			// the JSON holds them: pdata reads 3 spans of the one in
			// testdata/fuzz/FuzzSalvage/9ce850119295d606, whose keys
			// are "" and digits.)
			var p1, p2 fastjson.Parser
			r1, err1 := p1.ParseBytes(b)
			r2, err2 := p2.ParseBytes(out)
			if err1 == nil && err2 == nil {
				if n, m := countJSONSpans(r2), countJSONSpans(r1); n != m {
					t.Fatalf("rebuilt with %d spans, want the %d of the request", n, m)
				}
			}
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
			if _, ok := salvageProto(out, false); !ok && req.UnmarshalProto(b) == nil {
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

// BenchmarkSalvageStreamJSON: BenchmarkSalvageJSON's tiny spans, as many
// as a 20 MiB body (max_body_bytes' default) holds, salvaged by the walk
// that bodies over 4 MiB take (adv48); B/op is what it allocates, to
// compare with the tree's 45 times the body.
func BenchmarkSalvageStreamJSON(b *testing.B) {
	var body []byte
	body = append(body, `{"resourceSpans":[{"scopeSpans":[{"spans":[`...)
	for i := 0; len(body) < 20<<20-64; i++ {
		body = fmt.Appendf(body, `{"spanId":"%016x"},`, i)
	}
	body = append(body, `{"spanId":"ab"}]}]}]}`...)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := salvageStreamJSON(body); !ok {
			b.Fatal("not salvaged")
		}
	}
}

// deepSeedJSON is deepSeed as OTLP JSON.
func deepSeedJSON() []byte {
	req := ptraceotlp.NewExportRequest()
	if err := req.UnmarshalProto(deepSeed()); err != nil {
		panic(err)
	}
	b, _ := req.MarshalJSON()
	return b
}

// TestSalvageDeepJSON: the second scan of a JSON body nested too deep
// blames the span, scope or resource the depth is in, and refuses (ok
// false) what it cannot place or read.
func TestSalvageDeepJSON(t *testing.T) {
	deepVal := strings.Repeat(`{"arrayValue":{"values":[`, 5) + `{"intValue":"1"}` + strings.Repeat(`]}}`, 5)
	attr := `[{"key":"deep","value":` + deepVal + `}]`
	span := func(id int, attrs string) string {
		return fmt.Sprintf(`{"traceId":"0100000000000000000000000000000%d","spanId":"020000000000000%d","attributes":%s}`, id, id, attrs)
	}
	good := `[{"key":"gen_ai.tool.name","value":{"stringValue":"gram_read"}}]`
	for _, tc := range []struct {
		name, body string
		want       []string // paths blamed; nil: not salvaged
	}{
		{"span", `{"resourceSpans":[{"scopeSpans":[{"spans":[` + span(0, good) + `,` + span(1, attr) + `,` + span(2, good) + `]}]}]}`,
			[]string{"resourceSpans[0].scopeSpans[0].spans[1]: nested deeper than 12 levels at byte offset "}},
		{"snake_case", `{"resource_spans":[{"scope_spans":[{"spans":[` + span(0, attr) + `,` + span(1, good) + `]}]}]}`,
			[]string{"resourceSpans[0].scopeSpans[0].spans[0]: nested"}},
		{"resource_after_its_spans", `{"resourceSpans":[{"scopeSpans":[{"spans":[` + span(0, good) + `,` + span(1, good) + `]}],"resource":{"attributes":` + attr + `}},{"scopeSpans":[{"spans":[` + span(2, good) + `]}]}]}`,
			[]string{"resourceSpans[0].scopeSpans[0].spans[0]: its resource: nested", "resourceSpans[0].scopeSpans[0].spans[1]: its resource: nested"}},
		{"scope", `{"resourceSpans":[{"scopeSpans":[{"scope":{"attributes":` + attr + `},"spans":[` + span(0, good) + `]},{"spans":[` + span(1, good) + `]}]}]}`,
			[]string{"resourceSpans[0].scopeSpans[0].spans[0]: its scope: nested"}},
		{"resource_without_spans", `{"resourceSpans":[{"resource":{"attributes":` + attr + `}},{"scopeSpans":[{"spans":[` + span(1, good) + `]}]}]}`, nil},
		{"escaped_key", `{"resource\u0053pans":[{"scopeSpans":[{"spans":[` + span(0, attr) + `]}]}]}`, nil},
		{"more_after", `{"resourceSpans":[{"scopeSpans":[{"spans":[` + span(0, attr) + `]}]}]} {}`, nil},
		{"brackets_mismatched", `{"resourceSpans":[{"scopeSpans":[{"spans":[` + strings.Replace(span(0, attr), "]}}]", "}}}]", 1) + `]}]}]}`, nil},
		{"cut_short", `{"resourceSpans":[{"scopeSpans":[{"spans":[` + span(0, attr), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, bad, ok := salvageDeepJSON([]byte(tc.body), 12)
			if tc.want == nil {
				if ok {
					t.Fatalf("salvaged %s, blaming %v; want it refused whole", out, bad)
				}
				return
			}
			if !ok || len(bad) != len(tc.want) {
				t.Fatalf("ok %v, blamed %v; want %q", ok, bad, tc.want)
			}
			for i, w := range tc.want {
				if got := bad[i].Error(); !strings.HasPrefix(got, w) || !strings.HasSuffix(got, "(serve.receiver.max_depth)") {
					t.Errorf("blamed %q, want %q...", got, w)
				}
			}
			req := ptraceotlp.NewExportRequest()
			if err := req.UnmarshalJSON(out); err != nil {
				t.Fatalf("rebuilt %s does not decode: %v", out, err)
			}
			if strings.Contains(string(out), "arrayValue") {
				t.Errorf("rebuilt %s still holds the deep value", out)
			}
		})
	}
}

// TestSalvageDeepProto: salvageDeepProto blames the span, scope or
// resource the depth is in, empties it, and refuses (ok false) a request
// whose deep resource or scope holds no span to blame, even beside a deep
// span it could blame.
func TestSalvageDeepProto(t *testing.T) {
	const limit = 2
	why := tooDeepReason(limit)
	// spans appends n spans to ss, those in deep nested too deep.
	spans := func(ss ptrace.ScopeSpans, n int, deep ...int) {
		for i := range n {
			sp := ss.Spans().AppendEmpty()
			sp.SetSpanID(pcommon.SpanID{1, byte(i)})
			sp.SetTraceID(pcommon.TraceID{2, byte(i)})
			sp.Attributes().PutStr("gen_ai.tool.name", "gram_read")
			if slices.Contains(deep, i) {
				nest(sp.Attributes(), limit+1)
			}
		}
	}
	for _, tc := range []struct {
		name  string
		build func(td ptrace.Traces)
		want  []string // spans blamed; nil: not salvaged
	}{
		{"span", func(td ptrace.Traces) {
			spans(td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty(), 3, 1)
		}, []string{"resourceSpans[0].scopeSpans[0].spans[1]: " + why}},
		{"resource", func(td ptrace.Traces) {
			rs := td.ResourceSpans().AppendEmpty()
			nest(rs.Resource().Attributes(), limit+1)
			spans(rs.ScopeSpans().AppendEmpty(), 1)
			spans(rs.ScopeSpans().AppendEmpty(), 1)
			spans(td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty(), 1)
		}, []string{
			"resourceSpans[0].scopeSpans[0].spans[0]: its resource: " + why,
			"resourceSpans[0].scopeSpans[1].spans[0]: its resource: " + why,
		}},
		{"scope", func(td ptrace.Traces) {
			rs := td.ResourceSpans().AppendEmpty()
			ss := rs.ScopeSpans().AppendEmpty()
			nest(ss.Scope().Attributes(), limit+1)
			spans(ss, 2)
			spans(rs.ScopeSpans().AppendEmpty(), 2, 1)
		}, []string{
			"resourceSpans[0].scopeSpans[0].spans[0]: its scope: " + why,
			"resourceSpans[0].scopeSpans[0].spans[1]: its scope: " + why,
			"resourceSpans[0].scopeSpans[1].spans[1]: " + why,
		}},
		{"resource_without_spans", func(td ptrace.Traces) {
			nest(td.ResourceSpans().AppendEmpty().Resource().Attributes(), limit+1)
			spans(td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty(), 2, 0)
		}, nil},
		{"resource_with_an_empty_scope", func(td ptrace.Traces) {
			rs := td.ResourceSpans().AppendEmpty()
			nest(rs.Resource().Attributes(), limit+1)
			rs.ScopeSpans().AppendEmpty()
			spans(td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty(), 2, 0)
		}, nil},
		{"scope_without_spans", func(td ptrace.Traces) {
			rs := td.ResourceSpans().AppendEmpty()
			nest(rs.ScopeSpans().AppendEmpty().Scope().Attributes(), limit+1)
			spans(rs.ScopeSpans().AppendEmpty(), 2, 0)
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td := ptrace.NewTraces()
			tc.build(td)
			b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
			if err != nil {
				t.Fatal(err)
			}
			if protoValueDepth(b, limit) == nil {
				t.Fatal("the request is not too deep")
			}
			out, bad, ok := salvageDeepProto(b, limit)
			if tc.want == nil {
				if ok {
					t.Fatalf("salvaged, blaming %v; want it refused whole", bad)
				}
				return
			}
			if !ok {
				t.Fatalf("not salvaged; want %q", tc.want)
			}
			var got []string
			for _, s := range bad {
				if s.Kind != string(metrics.RejectTooDeep) {
					t.Errorf("%s counted as %q, want too_deep", s.Path, s.Kind)
				}
				got = append(got, s.Error())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("blamed %q\nwant    %q", got, tc.want)
			}
			req := ptraceotlp.NewExportRequest()
			if err := req.UnmarshalProto(out); err != nil {
				t.Fatalf("the rebuilt request does not decode: %v", err)
			}
			if err := protoValueDepth(out, limit); err != nil {
				t.Errorf("the rebuilt request: %v", err)
			}
			if n, m := countProtoSpans(out), countProtoSpans(b); n != m {
				t.Errorf("rebuilt with %d spans, want the %d of the request", n, m)
			}
		})
	}
}
