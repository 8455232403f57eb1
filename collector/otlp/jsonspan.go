package otlp

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"unsafe"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/valyala/fastjson"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// OTLP JSON, as pdata's unmarshaler reads it: field names in lowerCamelCase
// or snake_case, 64-bit integers as numbers or decimal strings, enums as
// numbers or names, ids in hex, a repeated field's last value kept (and a
// repeated list's items appended).

// ResourceJSON reads the resource objects of one resourceSpans element of
// OTLP JSON (more than one when the field is repeated: their attributes
// add up).
func ResourceJSON(objs []*fastjson.Value) Resource {
	var a attrs
	for _, o := range objs {
		eachKV(o, "attributes", func(key []byte, v *fastjson.Value) {
			if ref, ok := a.wants(resRefs, b2s(key)); ok {
				s, _ := anyString(v)
				// The resource outlives the parse it came from.
				a.set(ref, string(s))
			}
		})
	}
	return resourceOf(&a)
}

// JSONSpan reads one span object of OTLP JSON, at p in a document named
// source, of resource res, and returns its record read by rd; ignored for a
// span of another method, or the reason it cannot be used. The span's
// strings are copied: v may be reused once JSONSpan returns.
func (cv *Converter) JSONSpan(v *fastjson.Value, res *Resource, source string, rs, ss, sp int, rd *dialect.Reader) (rec *audit.Record, ignored bool, reason, kind string) {
	if reason, kind := cv.jsonSpan(v); reason != "" {
		return nil, false, reason, kind
	}
	return cv.convert(res, source, path{rs, ss, sp}, rd)
}

// CheckSpanJSON returns why the span object v of OTLP JSON cannot be
// read (its path aside: "spanId: must be hex digits of the id's length"),
// or "" when it can, and the RejectedSpan.Kind it is counted under (empty:
// bad_span), as JSONSpan does. It reads the span into cv, as JSONSpan does.
func (cv *Converter) CheckSpanJSON(v *fastjson.Value) (reason, kind string) {
	return cv.jsonSpan(v)
}

// StartJSON returns the start time of a span object of OTLP JSON, in
// nanoseconds since 1970; 0 when it has none that can be read.
func StartJSON(v *fastjson.Value) uint64 {
	var n uint64
	o, err := v.Object()
	if err != nil {
		return 0
	}
	o.Visit(func(k []byte, f *fastjson.Value) {
		if string(k) == "startTimeUnixNano" || string(k) == "start_time_unix_nano" {
			n, _ = uint64Of(f)
		}
	})
	return n
}

// jsonSpan reads v into cv.sp; it returns why the span cannot be read,
// and the RejectedSpan.Kind it is counted under (empty: bad_span).
func (cv *Converter) jsonSpan(v *fastjson.Value) (reason, kind string) {
	s := &cv.sp
	*s = spanFields{}
	o, err := v.Object()
	if err != nil {
		return "a span must be a JSON object", ""
	}
	o.Visit(func(k []byte, f *fastjson.Value) {
		if reason != "" || f.Type() == fastjson.TypeNull {
			return
		}
		var err error
		switch string(k) {
		case "traceId", "trace_id":
			if err = hexID(s.traceID[:], f); err != nil {
				reason = "traceId: " + err.Error()
			}
		case "spanId", "span_id":
			if err = hexID(s.spanID[:], f); err != nil {
				reason = "spanId: " + err.Error()
			}
		case "kind":
			var n int32
			if n, err = enumOf(f, spanKinds); err != nil {
				reason = "kind: " + err.Error()
			}
			s.kind = ptrace.SpanKind(n)
		case "startTimeUnixNano", "start_time_unix_nano":
			var n uint64
			if n, err = uint64Of(f); err != nil {
				reason, kind = "startTimeUnixNano: "+err.Error(), KindBadTime
			}
			s.start = pcommon.Timestamp(n)
		case "endTimeUnixNano", "end_time_unix_nano":
			var n uint64
			if n, err = uint64Of(f); err != nil {
				reason, kind = "endTimeUnixNano: "+err.Error(), KindBadTime
			}
			s.end = pcommon.Timestamp(n)
		case "attributes":
			if f.Type() != fastjson.TypeArray {
				reason = "attributes: must be an array"
				return
			}
			kvs(f, func(key []byte, v *fastjson.Value) {
				if ref, ok := s.attrs.wants(spanRefs, b2s(key)); ok && reason == "" {
					str, err := anyString(v)
					if err != nil {
						reason = "attribute " + strconv.Quote(string(key)) + ": " + err.Error()
						if err == errTooDeep {
							// As serve counts a value nested past its
							// serve.receiver.max_depth.
							kind = KindTooDeep
						}
					}
					s.attrs.set(ref, b2s(str))
				}
			})
		case "status":
			so, err := f.Object()
			if err != nil {
				reason = "status: must be an object"
				return
			}
			so.Visit(func(k []byte, f *fastjson.Value) {
				switch string(k) {
				case "code":
					n, err := enumOf(f, statusCodes)
					if err != nil {
						reason = "status.code: " + err.Error()
					}
					s.status = ptrace.StatusCode(n)
				case "message":
					b, err := f.StringBytes()
					if err != nil && f.Type() != fastjson.TypeNull {
						reason = "status.message: must be a string"
					}
					s.message = b2s(b)
				}
			})
		}
	})
	return reason, kind
}

// eachKV calls fn for every key and value of the KeyValue list at field
// key of o, every such field in order.
func eachKV(o *fastjson.Value, key string, fn func(key []byte, v *fastjson.Value)) {
	obj, err := o.Object()
	if err != nil {
		return
	}
	obj.Visit(func(k []byte, f *fastjson.Value) {
		if string(k) == key && f.Type() == fastjson.TypeArray {
			kvs(f, fn)
		}
	})
}

// kvs calls fn for every KeyValue object of the array a: its key (the last
// "key" field) and its value (the last "value" field, nil when none).
func kvs(a *fastjson.Value, fn func(key []byte, v *fastjson.Value)) {
	items, _ := a.Array()
	for _, kv := range items {
		o, err := kv.Object()
		if err != nil {
			continue
		}
		var key []byte
		var val *fastjson.Value
		o.Visit(func(k []byte, f *fastjson.Value) {
			switch string(k) {
			case "key":
				key, _ = f.StringBytes()
			case "value":
				val = f
			}
		})
		fn(key, val)
	}
}

// anyString renders an AnyValue object as the attribute's text (str):
// strings as they are, numbers and booleans by their text, arrays and key
// lists as pdata renders them (JSON), anything else empty. The text may
// alias v's parser.
func anyString(v *fastjson.Value) ([]byte, error) {
	if v == nil || v.Type() != fastjson.TypeObject {
		return nil, nil
	}
	o, _ := v.Object()
	// The last field that names a value wins, as when pdata decodes it.
	var kind string
	var val *fastjson.Value
	o.Visit(func(k []byte, f *fastjson.Value) {
		switch string(k) {
		case "stringValue", "string_value", "boolValue", "bool_value", "intValue", "int_value",
			"doubleValue", "double_value", "arrayValue", "array_value", "kvlistValue", "kvlist_value",
			"bytesValue", "bytes_value", "stringValueStrindex", "string_value_strindex":
			kind, val = string(k), f
		}
	})
	switch kind {
	case "stringValue", "string_value":
		if val.Type() == fastjson.TypeNull {
			return nil, nil
		}
		b, err := val.StringBytes()
		if err != nil {
			return nil, errNotString
		}
		return b, nil
	case "", "bytesValue", "bytes_value", "stringValueStrindex", "string_value_strindex":
		return nil, nil
	}
	pv := pcommon.NewValueEmpty()
	if err := setAny(pv, kind, val, 0); err != nil {
		return nil, err
	}
	return []byte(pv.AsString()), nil
}

// maxAnyDepth bounds the nesting of arrays and key lists followed.
const maxAnyDepth = 64

// setAny sets pv to the value of an AnyValue field kind.
func setAny(pv pcommon.Value, kind string, v *fastjson.Value, depth int) error {
	if depth > maxAnyDepth {
		return errTooDeep
	}
	switch kind {
	case "stringValue", "string_value":
		b, err := v.StringBytes()
		if err != nil && v.Type() != fastjson.TypeNull {
			return errNotString
		}
		pv.SetStr(string(b))
	case "boolValue", "bool_value":
		switch v.Type() {
		case fastjson.TypeTrue:
			pv.SetBool(true)
		case fastjson.TypeFalse:
			pv.SetBool(false)
		default:
			return errNotBool
		}
	case "intValue", "int_value":
		n, err := int64Of(v)
		if err != nil {
			return err
		}
		pv.SetInt(n)
	case "doubleValue", "double_value":
		f, err := float64Of(v)
		if err != nil {
			return err
		}
		pv.SetDouble(f)
	case "bytesValue", "bytes_value":
		b, _ := v.StringBytes()
		raw, err := base64.StdEncoding.DecodeString(string(b))
		if err != nil {
			return errNotBase64
		}
		pv.SetEmptyBytes().FromRaw(raw)
	case "arrayValue", "array_value":
		s := pv.SetEmptySlice()
		if v.Type() == fastjson.TypeNull {
			return nil
		}
		o, err := v.Object()
		if err != nil {
			return errNotObject
		}
		var ferr error
		o.Visit(func(k []byte, f *fastjson.Value) {
			if string(k) != "values" || ferr != nil {
				return
			}
			items, _ := f.Array()
			for _, it := range items {
				if ferr = setAnyValue(s.AppendEmpty(), it, depth+1); ferr != nil {
					return
				}
			}
		})
		return ferr
	case "kvlistValue", "kvlist_value":
		m := pv.SetEmptyMap()
		if v.Type() == fastjson.TypeNull {
			return nil
		}
		var ferr error
		eachKV(v, "values", func(key []byte, val *fastjson.Value) {
			if ferr == nil {
				// pdata keeps a repeated key twice, and renders the map as
				// JSON through a Go map, where the last one wins: replacing
				// it gives the same text.
				ferr = setAnyValue(m.PutEmpty(string(key)), val, depth+1)
			}
		})
		return ferr
	default:
		pv.SetStr("")
	}
	return nil
}

// setAnyValue sets pv to an AnyValue object.
func setAnyValue(pv pcommon.Value, v *fastjson.Value, depth int) error {
	if v == nil || v.Type() == fastjson.TypeNull {
		return nil
	}
	o, err := v.Object()
	if err != nil {
		return errNotObject
	}
	var kind string
	var val *fastjson.Value
	o.Visit(func(k []byte, f *fastjson.Value) {
		switch string(k) {
		case "stringValue", "string_value", "boolValue", "bool_value", "intValue", "int_value",
			"doubleValue", "double_value", "arrayValue", "array_value", "kvlistValue", "kvlist_value",
			"bytesValue", "bytes_value":
			kind, val = string(k), f
		}
	})
	if kind == "" {
		return nil
	}
	return setAny(pv, kind, val, depth)
}

// Errors of values that pdata's decoder would not take.
var (
	errNotString = errorString("must be a string")
	errNotBool   = errorString("must be true or false")
	errNotNumber = errorString("must be an integer, as a number or a decimal string")
	// errTooBig is said of an integer that 64 bits do not hold (a time
	// past the year 2554 in nanoseconds), which is an integer all the same.
	errTooBig    = errorString("out of range: an integer larger than 64 bits hold")
	errNotFloat  = errorString("must be a number")
	errNotBase64 = errorString("must be base64")
	errNotObject = errorString("must be an object")
	errNotHex    = errorString("must be hex digits of the id's length")
	errNotEnum   = errorString("must be a number or a known name")
	errTooDeep   = errorString("nested too deep")
	spanKinds    = map[string]int32{"SPAN_KIND_UNSPECIFIED": 0, "SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2, "SPAN_KIND_CLIENT": 3, "SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5}
	statusCodes  = map[string]int32{"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
)

type errorString string

func (e errorString) Error() string { return string(e) }

func uint64Of(v *fastjson.Value) (uint64, error) {
	switch v.Type() {
	case fastjson.TypeNumber:
		n, err := v.Uint64()
		if err != nil {
			return 0, intFault(v.MarshalTo(nil), false)
		}
		return n, nil
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		n, err := strconv.ParseUint(b2s(b), 10, 64)
		if err != nil {
			return 0, intFault(b, false)
		}
		return n, nil
	}
	return 0, errNotNumber
}

func int64Of(v *fastjson.Value) (int64, error) {
	switch v.Type() {
	case fastjson.TypeNumber:
		n, err := v.Int64()
		if err != nil {
			return 0, intFault(v.MarshalTo(nil), true)
		}
		return n, nil
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		n, err := strconv.ParseInt(b2s(b), 10, 64)
		if err != nil {
			return 0, intFault(b, true)
		}
		return n, nil
	}
	return 0, errNotNumber
}

// intFault says why text, which did not parse as a 64-bit integer, was
// refused: too big when it is digits (signed, a minus may come before
// them), else not an integer.
func intFault(text []byte, signed bool) error {
	digits := text
	if signed {
		digits = bytes.TrimPrefix(text, []byte("-"))
	}
	if len(digits) == 0 {
		return errNotNumber
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return errNotNumber
		}
	}
	return errTooBig
}

func float64Of(v *fastjson.Value) (float64, error) {
	switch v.Type() {
	case fastjson.TypeNumber:
		f, err := v.Float64()
		if err != nil {
			return 0, errNotFloat
		}
		return f, nil
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		f, err := strconv.ParseFloat(b2s(b), 64)
		if err != nil {
			return 0, errNotFloat
		}
		return f, nil
	}
	return 0, errNotFloat
}

func enumOf(v *fastjson.Value, names map[string]int32) (int32, error) {
	switch v.Type() {
	case fastjson.TypeNumber:
		n, err := v.Int()
		if err != nil || int(int32(n)) != n {
			return 0, errNotEnum
		}
		return int32(n), nil
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		n, ok := names[string(b)]
		if !ok {
			return 0, errNotEnum
		}
		return n, nil
	}
	return 0, errNotEnum
}

// hexID decodes a hex id of len(dst) bytes; an empty string leaves it
// zero.
func hexID(dst []byte, v *fastjson.Value) error {
	b, err := v.StringBytes()
	if err != nil {
		return errNotHex
	}
	if len(b) == 0 {
		return nil
	}
	if len(b) != 2*len(dst) {
		return errNotHex
	}
	if _, err := hex.Decode(dst, b); err != nil {
		return errNotHex
	}
	return nil
}

// b2s views b as a string without a copy: b must not change while the
// string is in use.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
