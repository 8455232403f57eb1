package receiver

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/valyala/fastjson"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// pdata decodes a request whole or not at all: one span with an id of the
// wrong length, or a time that is not an integer, refuses every span beside
// it. When a request does not decode, the salvage finds the spans that do
// not decode on their own, puts an empty span in the place of each (a span
// without attributes is not an MCP call: the conversion ignores it, and the
// paths of the others do not move), and reports them as rejected. Only the
// failure path pays for it, and it is bounded: a first pass looks at each
// span's fields without decoding it (ids, times, attribute values); only
// when that does not find every fault, and the request holds at most
// maxProbed spans, is each span decoded on its own by pdata.

// maxProbed is the most spans of a request that the salvage decodes one
// by one; a larger request whose faults the first pass does not find is
// refused whole, as pdata refuses it.
const maxProbed = 10_000

// maxSalvagedJSON is the largest OTLP JSON body salvaged from one tree.
// The salvage parses it into a tree, which costs up to 45 times its bytes
// for tiny spans (BenchmarkSalvageJSON); a larger broken body is walked
// where it lies and each span parsed on its own (salvageStreamJSON), and
// a span larger than this has the request refused whole. Protobuf is
// walked where it lies, at about the cost of decoding it.
const maxSalvagedJSON = 4 << 20

// salvageSlot lets one salvage run at a time: its memory comes on top of
// the request's, which the bytes in flight account for, and a flood of
// broken requests must not multiply it.
var salvageSlot = make(chan struct{}, 1)

// salvage runs fn in the salvage slot, waiting for it until ctx ends;
// it reports whether fn ran.
func salvage(ctx context.Context, fn func()) bool {
	select {
	case salvageSlot <- struct{}{}:
		defer func() { <-salvageSlot }()
		fn()
		return true
	case <-ctx.Done():
		return false
	}
}

// salvaged is a request that decodes once its broken spans are emptied.
type salvaged struct {
	// b is the request with the broken spans emptied, and req its
	// decoding.
	b   []byte
	req ptraceotlp.ExportRequest
	// bad are the emptied spans, with why each was refused.
	bad []otlp.RejectedSpan
}

// undecoded answers a body pdata could not decode (err): the request
// salvaged without its broken spans and those spans, or the refusal. deep
// is the refusal of a body rebuilt without spans nested too deep, which
// wire then is (nil when it is the body sent): a rebuilt body that cannot
// be salvaged is refused as it was before (offsets in it would name no
// place in the body sent).
func undecoded(ctx context.Context, wire []byte, asProto bool, deep *refusal, err error) (ptraceotlp.ExportRequest, []otlp.RejectedSpan, *refusal) {
	if req, bad, ok := salvageRequest(ctx, wire, asProto, deep == nil); ok {
		return req, bad, nil
	}
	switch {
	case deep != nil:
		return ptraceotlp.ExportRequest{}, nil, deep
	case asProto:
		return ptraceotlp.ExportRequest{}, nil, newRefusal(400, "cannot decode OTLP protobuf: "+protoFault(wire, err), metrics.RejectDecodeError)
	}
	return ptraceotlp.ExportRequest{}, nil, newRefusal(400, "cannot decode OTLP JSON: "+jsonFault(wire, err), metrics.RejectDecodeError)
}

// salvageRequest decodes b, a request pdata refused, without its broken
// spans (salvageProto or salvageJSON, one salvage at a time: salvage); it
// returns the request and the spans emptied, or ok false when b cannot be
// salvaged or ctx ends first. sent says b is the body as it was sent (not
// rebuilt without deep spans): a span's fault is then named with its
// byte offset in the body, else in the span.
func salvageRequest(ctx context.Context, b []byte, asProto, sent bool) (req ptraceotlp.ExportRequest, bad []otlp.RejectedSpan, ok bool) {
	var s salvaged
	salvage(ctx, func() {
		if asProto {
			s, ok = salvageProto(b, sent)
		} else {
			s, ok = salvageJSON(b)
		}
	})
	return s.req, s.bad, ok
}

// salvageDeep runs salvageDeepProto in the salvage slot (salvage); ok
// is false when it cannot salvage b or ctx ends first.
func salvageDeep(ctx context.Context, b []byte, limit int) (out []byte, bad []otlp.RejectedSpan, ok bool) {
	salvage(ctx, func() { out, bad, ok = salvageDeepProto(b, limit) })
	return out, bad, ok
}

// salvageDeepJ runs salvageDeepJSON in the salvage slot (salvage).
func salvageDeepJ(ctx context.Context, b []byte, limit int) (out []byte, bad []otlp.RejectedSpan, ok bool) {
	salvage(ctx, func() { out, bad, ok = salvageDeepJSON(b, limit) })
	return out, bad, ok
}

// salvageProto salvages an OTLP protobuf request that pdata refused. ok is
// false when the framing is broken, no span is to blame, or the request
// still does not decode without the broken spans. sent: as in
// salvageRequest.
func salvageProto(b []byte, sent bool) (s salvaged, ok bool) {
	if s, ok = rebuildProto(b, protoIDFault); ok {
		return s, true
	}
	if countProtoSpans(b) > maxProbed {
		return salvaged{}, false
	}
	return rebuildProto(b, func(span []byte) (string, string) { return protoSpanFault(b, span, sent) })
}

// rebuildProto returns b with each span that fault blames emptied, when
// that decodes.
func rebuildProto(b []byte, fault func([]byte) (why, kind string)) (s salvaged, ok bool) {
	out, bad, _, ok := emptyBlamed(b, protoBlame{span: fault, kind: metrics.RejectBadSpan})
	if !ok || len(bad) == 0 {
		return salvaged{}, false
	}
	s.req = ptraceotlp.NewExportRequest()
	if s.req.UnmarshalProto(out) != nil {
		return salvaged{}, false
	}
	s.b, s.bad = out, bad
	return s, true
}

// protoBlame says why a resource, a scope or a span of an OTLP protobuf
// request is refused ("" when it is not), each given its own message; a
// nil func blames nothing at its level.
type protoBlame struct {
	resource, scope func([]byte) string
	// span also says the reason the span is counted under; "": kind.
	span func([]byte) (why, kind string)
	// kind counts every span emptied, unless span says otherwise.
	kind metrics.RejectReason
}

// emptyBlamed walks the ResourceSpans, ScopeSpans and spans of the OTLP
// protobuf request b and returns it with each blamed resource, scope and
// span emptied (an empty message in its place, so the paths of the others
// do not move) and every other field as it came. A span is blamed for its
// resource first, then its scope, then itself; each is reported with its
// path and why. unblamed counts the blamed resources and scopes that hold
// no span to report. ok is false when b's framing breaks.
func emptyBlamed(b []byte, blame protoBlame) (out []byte, bad []otlp.RejectedSpan, unblamed int, ok bool) {
	// held returns why the first field num of message m that the level's
	// blame finds fault with is refused: a message may repeat a field, and
	// it may come after the spans it concerns.
	held := func(m []byte, num protowire.Number, fault func([]byte) string) string {
		why := ""
		if fault != nil {
			eachField(m, func(n protowire.Number, typ protowire.Type, v, _ []byte) bool {
				if n == num && typ == protowire.BytesType {
					why = fault(v)
				}
				return why == ""
			})
		}
		return why
	}
	// field appends raw to dst, or an empty message numbered num in its
	// place when emptied.
	field := func(dst []byte, num protowire.Number, raw []byte, emptied bool) []byte {
		if !emptied {
			return append(dst, raw...)
		}
		dst = protowire.AppendTag(dst, num, protowire.BytesType)
		return protowire.AppendBytes(dst, nil)
	}
	out = make([]byte, 0, len(b))
	rs := 0
	ok = eachField(b, func(num protowire.Number, typ protowire.Type, v, raw []byte) bool {
		if num != 1 || typ != protowire.BytesType {
			out = append(out, raw...)
			return true
		}
		resWhy := held(v, 1, blame.resource)
		spansInRS := 0
		var inner []byte
		ss := 0
		if !eachField(v, func(num protowire.Number, typ protowire.Type, v, raw []byte) bool {
			switch {
			case typ != protowire.BytesType || (num != 1 && num != 2):
				inner = append(inner, raw...)
				return true
			case num == 1:
				inner = field(inner, 1, raw, resWhy != "")
				return true
			}
			scopeWhy := held(v, 1, blame.scope)
			var spans []byte
			sp := 0
			if !eachField(v, func(num protowire.Number, typ protowire.Type, v, raw []byte) bool {
				switch {
				case typ != protowire.BytesType || (num != 1 && num != 2):
					spans = append(spans, raw...)
					return true
				case num == 1:
					spans = field(spans, 1, raw, scopeWhy != "")
					return true
				}
				reason, kind := "", ""
				switch {
				case resWhy != "":
					reason = "its resource: " + resWhy
				case scopeWhy != "":
					reason = "its scope: " + scopeWhy
				case blame.span != nil:
					reason, kind = blame.span(v)
				}
				if kind == "" {
					kind = string(blame.kind)
				}
				if reason != "" {
					bad = append(bad, otlp.RejectedSpan{Path: spanPath(rs, ss, sp), Reason: reason, Kind: kind})
				}
				spans = field(spans, 2, raw, reason != "")
				sp++
				return true
			}) {
				return false
			}
			if scopeWhy != "" && sp == 0 {
				unblamed++
			}
			spansInRS += sp
			inner = protowire.AppendTag(inner, 2, protowire.BytesType)
			inner = protowire.AppendBytes(inner, spans)
			ss++
			return true
		}) {
			return false
		}
		if resWhy != "" && spansInRS == 0 {
			unblamed++
		}
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, inner)
		rs++
		return true
	})
	if !ok {
		return nil, nil, 0, false
	}
	return out, bad, unblamed, true
}

// countProtoSpans counts the spans of a well-framed request.
func countProtoSpans(b []byte) int {
	n := 0
	eachField(b, func(num protowire.Number, _ protowire.Type, v, _ []byte) bool {
		if num == 1 {
			eachField(v, func(num protowire.Number, _ protowire.Type, v, _ []byte) bool {
				if num == 2 {
					eachField(v, func(num protowire.Number, _ protowire.Type, _, _ []byte) bool {
						if num == 2 {
							n++
						}
						return true
					})
				}
				return true
			})
		}
		return true
	})
	return n
}

// protoIDFault returns why the ids or the times of the Span message b do
// not decode, or "", and the reason it is counted under ("": bad_span):
// a time field that cannot be read is bad_time, as a call record's.
func protoIDFault(b []byte) (why, kind string) {
	eachField(b, func(num protowire.Number, typ protowire.Type, v, _ []byte) bool {
		if (num == 7 || num == 8) && typ != protowire.Fixed64Type {
			field := map[protowire.Number]string{7: "startTimeUnixNano", 8: "endTimeUnixNano"}[num]
			why, kind = fmt.Sprintf("%s: must be fixed64 (wire type 1), not wire type %d", field, typ), otlp.KindBadTime
			return false
		}
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
	return why, kind
}

// protoSpanFault returns why the Span message b, a slice of the request
// body, does not decode on its own, or "". A fault the framing walk can
// name (pbFrame: a tag of an invalid wire type, a length past the end of
// its message, in the span, its attributes, events or links) is named
// with its byte offset: in the body when sent, else in the span.
func protoSpanFault(body, b []byte, sent bool) (why, kind string) {
	one := protowire.AppendTag(nil, 2, protowire.BytesType)
	one = protowire.AppendBytes(one, b)
	sc := protowire.AppendTag(nil, 2, protowire.BytesType)
	sc = protowire.AppendBytes(sc, one)
	req := protowire.AppendTag(nil, 1, protowire.BytesType)
	req = protowire.AppendBytes(req, sc)
	err := ptraceotlp.NewExportRequest().UnmarshalProto(req)
	if err == nil {
		return "", ""
	}
	if why, kind := protoIDFault(b); why != "" {
		return why, kind
	}
	msg := strings.TrimPrefix(err.Error(), "unmarshal: ")
	if where := spanFrameFault(body, b, sent); where != "" {
		msg += ": " + where
	}
	return "cannot decode the span: " + msg, ""
}

// spanFrameFault walks the framing of the Span message b (pbFrame) and
// returns the fault it finds, or "". Offsets are of the body b is a slice
// of when sent, and said to be; else of the span.
func spanFrameFault(body, b []byte, sent bool) string {
	lo, hi, of := 0, len(b), "of the span"
	// b is a slice of body (eachField slices without copying): its offset
	// is what lies between their capacities.
	if off := cap(body) - cap(b); sent && len(b) > 0 && off >= 0 && off+len(b) <= len(body) && &body[off] == &b[0] {
		lo, hi, of = off, off+len(b), "of the body"
		b = body
	}
	f, ok := pbFrameIn(b, lo, hi, pbSpan, 1, "the span")
	switch {
	case !ok:
		return ""
	case f.wire != 0:
		return f.wireFault(" " + of)
	default:
		return fmt.Sprintf("%s runs past the end of the message that holds it, at byte offset %d %s", f.where, f.end, of)
	}
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
	if len(b) > maxSalvagedJSON {
		return salvageStreamJSON(b)
	}
	var p fastjson.Parser
	root, err := p.ParseBytes(b)
	if err != nil || root.Type() != fastjson.TypeObject {
		return salvaged{}, false
	}
	// One converter reads every span: one made per span would cost more
	// than the span.
	cv := otlp.NewConverter()
	if s, ok = rebuildJSON(root, cv.CheckSpanJSON); ok {
		return s, true
	}
	// The first pass emptied the spans it blamed: the second starts from
	// the request again.
	if root, err = p.ParseBytes(b); err != nil || countJSONSpans(root) > maxProbed {
		return salvaged{}, false
	}
	return rebuildJSON(root, func(v *fastjson.Value) (string, string) { return jsonSpanFault(cv, v) })
}

// rebuildJSON empties, in root, each span that fault blames (or that an
// earlier pass emptied), and returns root when it then decodes.
func rebuildJSON(root *fastjson.Value, fault func(*fastjson.Value) (why, kind string)) (s salvaged, ok bool) {
	var a fastjson.Arena
	for i, rs := range jsonList(root, "resourceSpans", "resource_spans") {
		for j, ss := range jsonList(rs, "scopeSpans", "scope_spans") {
			for k, sp := range jsonList(ss, "spans") {
				why, kind := fault(sp)
				if why == "" {
					continue
				}
				if kind == "" {
					kind = string(metrics.RejectBadSpan)
				}
				s.bad = append(s.bad, otlp.RejectedSpan{Path: spanPath(i, j, k), Reason: why, Kind: kind})
				ss.Get("spans").SetArrayItem(k, a.NewObject())
			}
		}
	}
	if len(s.bad) == 0 {
		return salvaged{}, false
	}
	out := root.MarshalTo(nil)
	s.req = ptraceotlp.NewExportRequest()
	if s.req.UnmarshalJSON(out) != nil {
		return salvaged{}, false
	}
	s.b = out
	return s, true
}

// countJSONSpans counts the spans of an OTLP JSON request.
func countJSONSpans(root *fastjson.Value) int {
	n := 0
	for _, rs := range jsonList(root, "resourceSpans", "resource_spans") {
		for _, ss := range jsonList(rs, "scopeSpans", "scope_spans") {
			n += len(jsonList(ss, "spans"))
		}
	}
	return n
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
func jsonSpanFault(cv *otlp.Converter, v *fastjson.Value) (why, kind string) {
	doc := `{"resourceSpans":[{"scopeSpans":[{"spans":[` + string(v.MarshalTo(nil)) + `]}]}]}`
	err := ptraceotlp.NewExportRequest().UnmarshalJSON([]byte(doc))
	if err == nil {
		return "", ""
	}
	if why, kind := cv.CheckSpanJSON(v); why != "" {
		return why, kind
	}
	// jsoniter's message ends with the bytes around the fault, which the
	// path already locates.
	msg, _, _ := strings.Cut(err.Error(), ", error found in")
	return "cannot decode the span: " + msg, ""
}

// spanPath locates a span as otlp.RejectedSpan.Path does.
func spanPath(rs, ss, sp int) string {
	return fmt.Sprintf("resourceSpans[%d].scopeSpans[%d].spans[%d]", rs, ss, sp)
}

// tooDeepReason is why a value nested deeper than serve.receiver.max_depth
// is refused: the whole request's, or one span's, in the same words.
func tooDeepReason(limit int) string {
	return fmt.Sprintf("an attribute value nests more than %d arrays or key-value lists (serve.receiver.max_depth)", limit)
}

// salvageDeepProto empties, in the OTLP protobuf request b that
// protoValueDepth refused, each span holding an attribute value nested
// more than limit deep (in its attributes, events or links), and every
// span of a resource or scope that holds one (the resource or scope is
// emptied too). It returns the request rebuilt, whose depth is checked
// again, and the spans emptied with why (in the words of the request's
// refusal), each counted under the same reason, too_deep;
// ok is false when b's framing breaks, or a deep resource or scope holds
// no span to blame. The walk that finds the deep values stops at limit:
// it goes no deeper than protoValueDepth did. Only the refused request
// pays for it: about one more walk of its bytes, and one copy.
func salvageDeepProto(b []byte, limit int) (out []byte, bad []otlp.RejectedSpan, ok bool) {
	why := tooDeepReason(limit)
	deep := func(k pbKind) func([]byte) string {
		return func(v []byte) string {
			if pbWalk(v, k, 0, limit) != nil {
				return why
			}
			return ""
		}
	}
	out, bad, unblamed, ok := emptyBlamed(b, protoBlame{
		resource: deep(pbResource), scope: deep(pbScope),
		span: func(v []byte) (string, string) { return deep(pbSpan)(v), "" },
		kind: metrics.RejectTooDeep,
	})
	if !ok || unblamed > 0 || len(bad) == 0 || protoValueDepth(out, limit) != nil {
		return nil, nil, false
	}
	return out, bad, true
}

// salvageDeepJSON is salvageDeepProto for an OTLP JSON body b that
// jsonScan found nested deeper than limit levels (jsonBodyDepth): a second
// scan, of the refused body only, follows the keys and array indexes of
// the envelope down to the spans (nothing is decoded, and no tree built),
// and each span, resource or scope inside which the nesting passes the
// limit is replaced by {}, with every span of such a resource or scope.
// Each span is named with the byte offset, in b, where its nesting passes
// the limit. ok is false when b is not one object of well-matched
// brackets with nothing after it, a key of the envelope is not spelt
// plainly (escaped) so that the depth falls outside every span, a deep
// resource or scope holds no span, or the rebuilt body still nests too
// deep (it is scanned again).
func salvageDeepJSON(b []byte, limit int) (out []byte, bad []otlp.RejectedSpan, ok bool) {
	type cut struct {
		start, end int
		idx        [3]int
		role       int
	}
	var (
		cuts   []cut
		deepAt = map[[3]int]int{} // span, resource or scope (idx, -1 for the levels above) -> offset
	)
	rootEnd, whole := walkEnvelope(b, func(i, depth int, env []envFrame) bool {
		if depth <= limit {
			return true
		}
		// Blame the innermost span, scope or resource open.
		for l := len(env) - 1; l >= 0; l-- {
			idx := env[l].idx
			switch env[l].role {
			case jSpan:
			case jScope:
				idx[2] = -1
			case jResource:
				idx[1], idx[2] = -1, -1
			default:
				continue
			}
			if _, seen := deepAt[idx]; !seen {
				deepAt[idx] = i
			}
			return true
		}
		return false
	}, func(f envFrame, end int) bool {
		switch f.role {
		case jSpan, jResource, jScope:
			cuts = append(cuts, cut{start: f.start, end: end, idx: f.idx, role: f.role})
		}
		return true
	})
	if !whole || len(bytes.TrimSpace(b[rootEnd:])) > 0 {
		return nil, nil, false
	}
	// The spans to empty: those deep themselves or under a deep resource
	// or scope; and those resources and scopes.
	why := func(at int) string {
		return jsonDeepReason(limit, at)
	}
	blamed := map[[3]int]bool{}
	var keep []cut
	for _, c := range cuts {
		rsKey, ssKey := [3]int{c.idx[0], -1, -1}, [3]int{c.idx[0], c.idx[1], -1}
		switch c.role {
		case jSpan:
			reason := ""
			if at, ok := deepAt[c.idx]; ok {
				reason = why(at)
			}
			if at, ok := deepAt[ssKey]; ok {
				reason = "its scope: " + why(at)
			}
			if at, ok := deepAt[rsKey]; ok {
				reason = "its resource: " + why(at)
			}
			if reason == "" {
				continue
			}
			blamed[c.idx], blamed[ssKey], blamed[rsKey] = true, true, true
			bad = append(bad, otlp.RejectedSpan{Path: spanPath(c.idx[0], c.idx[1], c.idx[2]), Reason: reason, Kind: string(metrics.RejectTooDeep)})
		case jResource:
			if _, ok := deepAt[rsKey]; !ok {
				continue
			}
		case jScope:
			if _, ok := deepAt[ssKey]; !ok {
				continue
			}
		}
		keep = append(keep, c)
	}
	for k := range deepAt {
		if !blamed[k] {
			return nil, nil, false
		}
	}
	if len(bad) == 0 {
		return nil, nil, false
	}
	slices.SortFunc(keep, func(x, y cut) int { return x.start - y.start })
	out = make([]byte, 0, len(b))
	from := 0
	for _, c := range keep {
		out = append(append(out, b[from:c.start]...), "{}"...)
		from = c.end
	}
	out = append(out, b[from:]...)
	if d, _, _ := jsonScan(out, limit); d > limit {
		return nil, nil, false
	}
	return out, bad, true
}

// bytesStart returns the offset of the first byte of b that is not JSON
// white space.
func bytesStart(b []byte) int {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}
