package receiver

import (
	"fmt"
	"strings"

	"github.com/valyala/fastjson"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/mcpaudit/mcpaudit/collector/otlp"
)

// pdata decodes a request whole or not at all: one span with an id of the
// wrong length, or a time that is not an integer, refuses every span beside
// it. When a request does not decode, the salvage finds the spans that do
// not decode on their own, puts an empty span in the place of each (a span
// without attributes is not an MCP call: the conversion ignores it, and the
// paths of the others do not move), and reports them as rejected. Only the
// failure path pays for it.

// salvaged is a request that decodes once its broken spans are emptied.
type salvaged struct {
	// b is the request with the broken spans emptied.
	b []byte
	// bad are the emptied spans, with why each was refused.
	bad []otlp.RejectedSpan
}

// salvageProto salvages an OTLP protobuf request that pdata refused. ok is
// false when the framing is broken, no span is to blame, or the request
// still does not decode without the broken spans.
func salvageProto(b []byte) (s salvaged, ok bool) {
	var out []byte
	rs := 0
	if !eachField(b, func(num protowire.Number, typ protowire.Type, v, raw []byte) bool {
		if num != 1 || typ != protowire.BytesType {
			out = append(out, raw...)
			return true
		}
		var inner []byte
		ss := 0
		if !eachField(v, func(num protowire.Number, typ protowire.Type, v, raw []byte) bool {
			if num != 2 || typ != protowire.BytesType {
				inner = append(inner, raw...)
				return true
			}
			var spans []byte
			sp := 0
			if !eachField(v, func(num protowire.Number, typ protowire.Type, v, raw []byte) bool {
				if num != 2 || typ != protowire.BytesType {
					spans = append(spans, raw...)
					return true
				}
				if why := protoSpanFault(v); why != "" {
					s.bad = append(s.bad, otlp.RejectedSpan{Path: spanPath(rs, ss, sp), Reason: why})
					spans = protowire.AppendTag(spans, 2, protowire.BytesType)
					spans = protowire.AppendBytes(spans, nil)
				} else {
					spans = append(spans, raw...)
				}
				sp++
				return true
			}) {
				return false
			}
			inner = protowire.AppendTag(inner, 2, protowire.BytesType)
			inner = protowire.AppendBytes(inner, spans)
			ss++
			return true
		}) {
			return false
		}
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, inner)
		rs++
		return true
	}) || len(s.bad) == 0 {
		return salvaged{}, false
	}
	if ptraceotlp.NewExportRequest().UnmarshalProto(out) != nil {
		return salvaged{}, false
	}
	s.b = out
	return s, true
}

// protoSpanFault returns why the Span message b does not decode, or "".
func protoSpanFault(b []byte) string {
	one := protowire.AppendTag(nil, 2, protowire.BytesType)
	one = protowire.AppendBytes(one, b)
	sc := protowire.AppendTag(nil, 2, protowire.BytesType)
	sc = protowire.AppendBytes(sc, one)
	req := protowire.AppendTag(nil, 1, protowire.BytesType)
	req = protowire.AppendBytes(req, sc)
	err := ptraceotlp.NewExportRequest().UnmarshalProto(req)
	if err == nil {
		return ""
	}
	why := ""
	eachField(b, func(num protowire.Number, typ protowire.Type, v, _ []byte) bool {
		if typ != protowire.BytesType || len(v) == 0 {
			return true
		}
		switch {
		case num == 1 && len(v) != 16:
			why = fmt.Sprintf("traceId: must be 16 bytes, not %d", len(v))
		case num == 2 && len(v) != 8:
			why = fmt.Sprintf("spanId: must be 8 bytes, not %d", len(v))
		case num == 4 && len(v) != 8:
			why = fmt.Sprintf("parentSpanId: must be 8 bytes, not %d", len(v))
		}
		return why == ""
	})
	if why != "" {
		return why
	}
	return "cannot decode the span: " + strings.TrimPrefix(err.Error(), "unmarshal: ")
}

// eachField calls fn with each field of the message b, its value and its
// bytes on the wire; it reports whether b is well framed and fn accepted
// every field.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v, raw []byte) bool) bool {
	for len(b) > 0 {
		num, typ, tl := protowire.ConsumeTag(b)
		if tl < 0 {
			return false
		}
		fl := protowire.ConsumeFieldValue(num, typ, b[tl:])
		if fl < 0 {
			return false
		}
		var v []byte
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(b[tl:])
		}
		if !fn(num, typ, v, b[:tl+fl]) {
			return false
		}
		b = b[tl+fl:]
	}
	return true
}

// salvageJSON salvages an OTLP JSON request that pdata refused, as
// salvageProto does.
func salvageJSON(b []byte) (s salvaged, ok bool) {
	var p fastjson.Parser
	root, err := p.ParseBytes(b)
	if err != nil || root.Type() != fastjson.TypeObject {
		return salvaged{}, false
	}
	var a fastjson.Arena
	for i, rs := range jsonList(root, "resourceSpans", "resource_spans") {
		for j, ss := range jsonList(rs, "scopeSpans", "scope_spans") {
			for k, sp := range jsonList(ss, "spans") {
				if why := jsonSpanFault(sp); why != "" {
					s.bad = append(s.bad, otlp.RejectedSpan{Path: spanPath(i, j, k), Reason: why})
					spans := ss.Get("spans")
					spans.SetArrayItem(k, a.NewObject())
				}
			}
		}
	}
	if len(s.bad) == 0 {
		return salvaged{}, false
	}
	out := root.MarshalTo(nil)
	if ptraceotlp.NewExportRequest().UnmarshalJSON(out) != nil {
		return salvaged{}, false
	}
	s.b = out
	return s, true
}

// jsonList returns the items of the array under the first of keys that v
// has, nil when v is not an object or the value not an array. pdata reads
// both the lowerCamelCase and the snake_case names.
func jsonList(v *fastjson.Value, keys ...string) []*fastjson.Value {
	for _, k := range keys {
		if f := v.Get(k); f != nil {
			items, _ := f.Array()
			return items
		}
	}
	return nil
}

// jsonSpanFault returns why the span object v of OTLP JSON does not
// decode, or "".
func jsonSpanFault(v *fastjson.Value) string {
	doc := `{"resourceSpans":[{"scopeSpans":[{"spans":[` + string(v.MarshalTo(nil)) + `]}]}]}`
	err := ptraceotlp.NewExportRequest().UnmarshalJSON([]byte(doc))
	if err == nil {
		return ""
	}
	if why := otlp.CheckSpanJSON(v); why != "" {
		return why
	}
	// jsoniter's message ends with the bytes around the fault, which the
	// path already locates.
	msg, _, _ := strings.Cut(err.Error(), ", error found in")
	return "cannot decode the span: " + msg
}

// spanPath locates a span as otlp.RejectedSpan.Path does.
func spanPath(rs, ss, sp int) string {
	return fmt.Sprintf("resourceSpans[%d].scopeSpans[%d].spans[%d]", rs, ss, sp)
}
