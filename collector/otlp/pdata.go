package otlp

import (
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Result is what Read made of one batch of spans.
type Result struct {
	// Records are the calls, each with its reading.
	Records []*audit.Record
	// Sources names, for each record, the stream it came on: the resource
	// that exported it (see SourceOf).
	Sources []string
	// Known is, for each record, what its span told beside its payloads,
	// for a reader that reads its call again (dialect.Reader.ReadKnown),
	// once masked.
	Known    []dialect.Known
	Rejected []RejectedSpan
	// Ignored counts spans that are not tools/call (initialize, tools/list...).
	Ignored int
}

// Read reads every span of td, each call by rd from the one parse of its
// payloads. source prefixes each call's Source. Spans that are not
// tools/call are counted in Ignored; spans that are but lack what a call
// needs are listed in Rejected, and the others are kept. With rd nil the
// records carry their calls only.
func (cv *Converter) Read(td ptrace.Traces, source string, rd *dialect.Reader) Result {
	var res Result
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		r := ResourceOf(rs.Resource().Attributes())
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				cv.pdataSpan(spans.At(k))
				cv.readSpan(&res, &r, source, path{i, j, k}, rd)
			}
		}
	}
	return res
}

// readSpan converts the span in cv.sp, at p in a resource r, into res:
// a record, an ignored span or a rejected one.
func (cv *Converter) readSpan(res *Result, r *Resource, source string, p path, rd *dialect.Reader) {
	rec, ignored, reason, kind := cv.convert(r, source, p, rd)
	switch {
	case reason != "":
		res.Rejected = append(res.Rejected, RejectedSpan{Path: p.String(), Reason: reason, Kind: kind})
	case ignored:
		res.Ignored++
	default:
		res.Records = append(res.Records, rec)
		res.Sources = append(res.Sources, r.Source)
		res.Known = append(res.Known, cv.known)
	}
}

// Read reads td with a converter of its own that keeps payloads; see
// Converter.Read.
func Read(td ptrace.Traces, source string, rd *dialect.Reader) Result {
	return NewConverter().Read(td, source, rd)
}

// ResourceOf reads a resource's attributes.
func ResourceOf(m pcommon.Map) Resource {
	var a attrs
	m.Range(func(k string, v pcommon.Value) bool {
		if ref, ok := a.wants(resRefs, k); ok {
			a.set(ref, str(v))
		}
		return true
	})
	return resourceOf(&a)
}

// pdataSpan reads sp into cv.sp.
func (cv *Converter) pdataSpan(sp ptrace.Span) {
	s := &cv.sp
	s.kind, s.start, s.end = sp.Kind(), sp.StartTimestamp(), sp.EndTimestamp()
	s.traceID, s.spanID = sp.TraceID(), sp.SpanID()
	s.status, s.message = sp.Status().Code(), sp.Status().Message()
	s.attrs.reset()
	sp.Attributes().Range(func(k string, v pcommon.Value) bool {
		if ref, ok := s.attrs.wants(spanRefs, k); ok {
			s.attrs.set(ref, str(v))
		}
		return true
	})
}

// str renders an attribute value as text: strings as they are, numbers
// and booleans by their text, and structured values (some
// instrumentations record arguments so) as JSON.
func str(v pcommon.Value) string {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return v.Str()
	case pcommon.ValueTypeInt, pcommon.ValueTypeDouble, pcommon.ValueTypeBool, pcommon.ValueTypeMap, pcommon.ValueTypeSlice:
		return v.AsString()
	}
	return ""
}
