package otlp

import (
	"encoding/binary"
	"strconv"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"google.golang.org/protobuf/encoding/protowire"
)

// Message is an OTLP ExportTraceServiceRequest in its protobuf encoding
// that CheckProto accepted, for ReadProto.
type Message struct {
	b        []byte
	maxAttrs int
	spans    int
}

// CheckProto reports whether ReadProto can read the OTLP
// ExportTraceServiceRequest b exactly as Read reads it once decoded by
// pdata, and returns it as a Message for ReadProto if so. It reads b
// without side effects.
//
// It accepts only requests it can read exactly as pdata would: ok is
// false when b holds anything it leaves to pdata: a field it does not know
// (the deprecated instrumentation_library_spans, entity references, a
// field unknown to an event or a link), a singular message given twice
// (which protobuf merges), a trace or span id of the wrong size (a link's
// too), a wire type other than
// the field's, an attribute the conversion reads whose value is neither a
// string nor an integer, values nested more than 64 deep, or a span or
// resource with more than maxAttrs attributes. The caller then decodes b
// with pdata and calls Read, which also reports any error the way it
// always did: every message CheckProto accepts, pdata decodes without
// error (FuzzReadProto).
func CheckProto(b []byte, maxAttrs int) (Message, bool) {
	var cv Converter
	if !cv.walkProto(b, maxAttrs, nil, "", nil) {
		return Message{}, false
	}
	return Message{b: b, maxAttrs: maxAttrs, spans: cv.spans}, true
}

// ReadProto reads the spans of m as Read reads the same request decoded
// by pdata, but straight from the wire: what a call needs is read where
// it lies, and nothing else is built (pdata makes an object and a string
// for every attribute of every span, and most are never read).
//
// The records share nothing with m's bytes, which may be reused once
// ReadProto returns.
func (cv *Converter) ReadProto(m Message, source string, rd *dialect.Reader) Result {
	// Most spans of a request are calls: the lists are made once.
	res := Result{Records: make([]*audit.Record, 0, m.spans), Sources: make([]string, 0, m.spans), Known: make([]dialect.Known, 0, m.spans)}
	cv.walkProto(m.b, m.maxAttrs, &res, source, rd)
	if len(res.Records) == 0 {
		// As Read leaves them.
		res.Records, res.Sources, res.Known = nil, nil, nil
	}
	return res
}

// Field numbers and wire types of the OTLP trace messages
// (opentelemetry/proto/trace/v1/trace.proto, common/v1, resource/v1).
const (
	lenType = protowire.BytesType
	varType = protowire.VarintType
	f64Type = protowire.Fixed64Type
	f32Type = protowire.Fixed32Type
)

// walkProto walks an ExportTraceServiceRequest. With res nil it only
// checks; otherwise it converts every span into res (the message was
// checked before).
func (cv *Converter) walkProto(b []byte, maxAttrs int, res *Result, source string, rd *dialect.Reader) bool {
	i := 0
	cv.spans = 0
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		if num != 1 || typ != lenType || !cv.resourceSpans(v, i, maxAttrs, res, source, rd) {
			return false
		}
		i++
		return true
	})
}

// resourceSpans walks ResourceSpans number i.
func (cv *Converter) resourceSpans(b []byte, i, maxAttrs int, res *Result, source string, rd *dialect.Reader) bool {
	// The resource may come after its spans on the wire: it is found first.
	var resource []byte
	haveResource := false
	if !fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch {
		case num == 1 && typ == lenType:
			if haveResource {
				return false
			}
			resource, haveResource = v, true
			return true
		case num == 2 && typ == lenType, num == 3 && typ == lenType:
			return true // scope spans, schema URL
		}
		return false
	}) {
		return false
	}
	var ra attrs
	if !resourceAttrs(resource, maxAttrs, &ra) {
		return false
	}
	r := resourceOf(&ra)
	j := 0
	for len(b) > 0 {
		num, _, v, n := pbField(b)
		b = b[n:]
		if num != 2 {
			continue
		}
		if !cv.scopeSpans(v, path{i, j, 0}, &r, maxAttrs, res, source, rd) {
			return false
		}
		j++
	}
	return true
}

// resourceAttrs reads a Resource's attributes into a.
func resourceAttrs(b []byte, maxAttrs int, a *attrs) bool {
	count := 0
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch {
		case num == 1 && typ == lenType:
			count++
			return count <= maxAttrs && readKeyValue(v, resRefs, a)
		case num == 2 && typ == varType:
			return true // dropped attributes
		}
		return false
	})
}

// scopeSpans walks ScopeSpans p.rs, p.ss.
func (cv *Converter) scopeSpans(b []byte, p path, r *Resource, maxAttrs int, res *Result, source string, rd *dialect.Reader) bool {
	haveScope := false
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch {
		case num == 1 && typ == lenType:
			if haveScope || !checkScope(v) {
				return false
			}
			haveScope = true
		case num == 2 && typ == lenType:
			if !cv.span(v, maxAttrs) {
				return false
			}
			cv.spans++
			if res != nil {
				cv.readSpan(res, r, source, p, rd)
			}
			p.sp++
		case num == 3 && typ == lenType:
			// schema URL
		default:
			return false
		}
		return true
	})
}

// fields calls check with each field of the message b, in order, and
// reports whether b is well formed and check accepted every field.
func fields(b []byte, check func(num protowire.Number, typ protowire.Type, v []byte) bool) bool {
	for len(b) > 0 {
		num, typ, v, n := pbField(b)
		if n < 0 || !check(num, typ, v) {
			return false
		}
		b = b[n:]
	}
	return true
}

// checkScope checks an InstrumentationScope, which the conversion does not read.
func checkScope(b []byte) bool {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch {
		case (num == 1 || num == 2) && typ == lenType, num == 4 && typ == varType:
			return true // name, version, dropped attributes
		case num == 3 && typ == lenType:
			return readKeyValue(v, nil, nil)
		}
		return false
	})
}

// span reads a Span into cv.sp, as pdataSpan does.
func (cv *Converter) span(b []byte, maxAttrs int) bool {
	s := &cv.sp
	*s = spanFields{}
	count, haveStatus := 0, false
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch {
		case num == 1 && typ == lenType:
			if len(v) != 0 && len(v) != len(s.traceID) {
				return false
			}
			s.traceID = pcommon.TraceID{}
			copy(s.traceID[:], v)
		case num == 2 && typ == lenType:
			if len(v) != 0 && len(v) != len(s.spanID) {
				return false
			}
			s.spanID = pcommon.SpanID{}
			copy(s.spanID[:], v)
		case num == 4 && typ == lenType:
			if len(v) != 0 && len(v) != len(s.spanID) {
				return false
			}
		case (num == 3 || num == 5) && typ == lenType:
			// trace_state, name
		case num == 6 && typ == varType:
			s.kind = ptrace.SpanKind(int32(fieldVarint(v)))
		case num == 7 && typ == f64Type:
			s.start = pcommon.Timestamp(binary.LittleEndian.Uint64(v))
		case num == 8 && typ == f64Type:
			s.end = pcommon.Timestamp(binary.LittleEndian.Uint64(v))
		case num == 9 && typ == lenType:
			if count++; count > maxAttrs {
				return false
			}
			if !readKeyValue(v, spanRefs, &s.attrs) {
				return false
			}
		case (num == 10 || num == 12 || num == 14) && typ == varType:
			// dropped attributes, events, links
		case num == 11 && typ == lenType:
			// An event (SDKs record an error as one): not read, but
			// checked as pdata would decode it.
			if !checkEvent(v) {
				return false
			}
		case num == 13 && typ == lenType:
			if !checkLink(v) {
				return false
			}
		case num == 15 && typ == lenType:
			if haveStatus || !readStatus(v, s) {
				return false
			}
			haveStatus = true
		case num == 16 && typ == f32Type:
			// flags
		default:
			return false
		}
		return true
	})
}

// checkEvent checks a Span.Event, which the conversion does not read.
func checkEvent(b []byte) bool {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch {
		case num == 1 && typ == f64Type, num == 2 && typ == lenType, num == 4 && typ == varType:
			return true // time, name, dropped attributes
		case num == 3 && typ == lenType:
			return readKeyValue(v, nil, nil)
		}
		return false
	})
}

// checkLink checks a Span.Link, which the conversion does not read.
func checkLink(b []byte) bool {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch {
		case num == 1 && typ == lenType:
			return len(v) == 0 || len(v) == len(pcommon.TraceID{})
		case num == 2 && typ == lenType:
			return len(v) == 0 || len(v) == len(pcommon.SpanID{})
		case num == 3 && typ == lenType, num == 5 && typ == varType, num == 6 && typ == f32Type:
			return true // trace_state, dropped attributes, flags
		case num == 4 && typ == lenType:
			return readKeyValue(v, nil, nil)
		}
		return false
	})
}

// readStatus reads a Status into s.
func readStatus(b []byte, s *spanFields) bool {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) bool {
		switch {
		case num == 2 && typ == lenType:
			s.message = b2s(v)
		case num == 3 && typ == varType:
			s.status = ptrace.StatusCode(int32(fieldVarint(v)))
		default:
			return false
		}
		return true
	})
}

// readKeyValue reads a KeyValue: with refs, into a when a wants its key
// (the value must then be a string, empty or bytes, which str renders as
// pdata's own rendering would: the other kinds are left to pdata); with
// refs nil it only checks it.
func readKeyValue(b []byte, refs map[string]attrRef, a *attrs) bool {
	return keyValue(b, refs, a, 0)
}

// checkKeyValue checks a KeyValue nested depth arrays or lists deep.
func checkKeyValue(b []byte, depth int) bool { return keyValue(b, nil, nil, depth) }

func keyValue(b []byte, refs map[string]attrRef, a *attrs, depth int) bool {
	var key, val []byte
	haveKey, haveVal := false, false
	for len(b) > 0 {
		num, typ, v, n := pbField(b)
		if n < 0 || typ != lenType {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && !haveKey:
			key, haveKey = v, true
		case num == 2 && !haveVal:
			val, haveVal = v, true
		default:
			return false
		}
	}
	kind, text, ok := anyValue(val, depth)
	if !ok {
		return false
	}
	if refs == nil {
		return true
	}
	if ref, want := a.wants(refs, b2s(key)); want {
		switch kind {
		case 0, 7:
			// empty and bytes: str gives ""
		case 1:
			a.set(ref, b2s(text))
		case 3:
			a.set(ref, strconv.FormatInt(int64(fieldVarint(text)), 10))
		default:
			return false
		}
	}
	return true
}

// maxProtoDepth bounds the nesting of attribute values ReadProto walks; a
// deeper one is left to pdata (the receiver refuses values nested past its
// max_depth before).
const maxProtoDepth = 64

// anyValue checks an AnyValue nested depth arrays or lists deep and returns
// the number of the field it holds (0 for none) and its value: the bytes of
// a string, the encoding of an integer.
func anyValue(b []byte, depth int) (kind protowire.Number, text []byte, ok bool) {
	if depth > maxProtoDepth {
		return 0, nil, false
	}
	for len(b) > 0 {
		num, typ, v, n := pbField(b)
		if n < 0 || kind != 0 {
			return 0, nil, false
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 7) && typ == lenType, num == 3 && typ == varType:
			text = v
		case num == 2 && typ == varType, num == 4 && typ == f64Type:
		case num == 5 && typ == lenType:
			// ArrayValue: values
			if !repeated(v, func(e []byte) bool { _, _, ok := anyValue(e, depth+1); return ok }) {
				return 0, nil, false
			}
		case num == 6 && typ == lenType:
			// KeyValueList: values
			if !repeated(v, func(e []byte) bool { return checkKeyValue(e, depth+1) }) {
				return 0, nil, false
			}
		default:
			return 0, nil, false
		}
		kind = num
	}
	return kind, text, true
}

// repeated checks a message whose only field is a repeated message field
// number 1, each element by check.
func repeated(b []byte, check func([]byte) bool) bool {
	for len(b) > 0 {
		num, typ, v, n := pbField(b)
		if n < 0 || num != 1 || typ != lenType || !check(v) {
			return false
		}
		b = b[n:]
	}
	return true
}

// pbField consumes one field of b: its number, its type, its value (the
// bytes of a length-delimited field, the encoding of a scalar) and the
// bytes it took; n < 0 for a malformed field or a type ReadProto does not
// take (groups).
func pbField(b []byte) (num protowire.Number, typ protowire.Type, v []byte, n int) {
	num, typ, n = protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, -1
	}
	var m int
	switch typ {
	case lenType:
		v, m = protowire.ConsumeBytes(b[n:])
		return num, typ, v, tally(n, m)
	case varType:
		_, m = protowire.ConsumeVarint(b[n:])
	case f64Type:
		_, m = protowire.ConsumeFixed64(b[n:])
	case f32Type:
		_, m = protowire.ConsumeFixed32(b[n:])
	default:
		return 0, 0, nil, -1
	}
	if m < 0 {
		return 0, 0, nil, -1
	}
	return num, typ, b[n : n+m], n + m
}

func tally(n, m int) int {
	if m < 0 {
		return -1
	}
	return n + m
}

// fieldVarint decodes the encoding of a varint field that pbField returned.
func fieldVarint(v []byte) uint64 {
	x, _ := protowire.ConsumeVarint(v)
	return x
}
