package capture

import (
	"fmt"
	"math"
	"strconv"
	"time"
	"unsafe"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"github.com/valyala/fastjson"
)

// RecordError says why one call record was rejected.
type RecordError struct {
	Source string // file name or "-"
	Line   int    // 1-based line (NDJSON) or element (JSON array); 0 if unknown
	Field  string // the offending field, empty when the record is not JSON
	// Reason says why, in words for the sender and the log.
	Reason string
	// Value is the start of the offending value (at most MaxLoggedValue
	// bytes; set for a bad time), for a log that hides the input quoted in
	// Reason: the receiver's log shows it after redaction.
	Value string
	// Kind is the reason the record is counted under in
	// mcpaudit_ingest_rejected_total (one of exporter/metrics'
	// RejectReasons), set where the record is rejected, so that a count
	// never depends on Reason's wording; empty is invalid_json.
	Kind string
}

// The Kinds of a RecordError or SpanError, as exporter/metrics spells them
// (RejectMissingField, RejectTooLarge, RejectBadTime, RejectInvalidJSON),
// which capture does not import; a span's default is otlp's.
const (
	kindMissingField = "missing_field"
	kindTooLarge     = "too_large"
	kindBadTime      = otlp.KindBadTime
	kindInvalidJSON  = "invalid_json"
)

func (e *RecordError) Error() string {
	loc := e.Source
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: field %s: %s", loc, e.Field, e.Reason)
	}
	return loc + ": " + e.Reason
}

// MaxLoggedValue bounds RecordError.Value, in bytes.
const MaxLoggedValue = 40

// maxDurationMS is the longest duration_ms a time.Duration holds, in whole
// milliseconds.
const maxDurationMS = float64(math.MaxInt64 / int64(time.Millisecond))

// RecordParser parses call records. It reuses its buffers: a parser is not
// safe for concurrent use, and the Call it returns does not alias data.
type RecordParser struct {
	p fastjson.Parser
	// canon holds canonical arguments while the ids are computed.
	canon []byte
	// text gathers the call's text fields; see texts.
	text texts
	// payload is the parsed JSON of the last call, for its reader.
	payload dialect.Payload
	// call is the last call parsed: a reader copies it into its record's
	// one allocation (dialect.Reader.ReadCopy).
	call audit.Call
	// warns holds the warnings of the last record parsed (Warnings).
	warns []Warning
	// once holds a record that names a member twice, with the earlier
	// copies blanked (canon.KeepLast), and repeats what KeepLast found.
	once    []byte
	repeats []canon.Repeat
}

// Warnings returns what the last record parsed held that was read
// leniently (a name given twice, a member of the wrong type); the record
// was kept. Valid until the next parse.
func (rp *RecordParser) Warnings() []Warning { return rp.warns }

// texts gathers the text fields of one call in one buffer, so that they
// cost one string allocation together instead of one each: every field is
// a substring of that one string. A field keeps the whole string alive,
// which is a few hundred bytes per call.
type texts struct {
	buf []byte
	all string
}

// span locates one field in texts.
type span struct{ start, end int }

func (t *texts) reset() { t.buf, t.all = t.buf[:0], "" }

// add appends b as a new field.
func (t *texts) add(b []byte) span {
	s := span{start: len(t.buf)}
	t.buf = append(t.buf, b...)
	s.end = len(t.buf)
	return s
}

// done makes the one string; get may be called after it.
func (t *texts) done() { t.all = string(t.buf) }

// view returns a field before done, as a view of the buffer, which
// appends leave as it is: not to be kept past the next reset.
func (t *texts) view(s span) string {
	return unsafe.String(unsafe.SliceData(t.buf[s.start:]), s.end-s.start)
}

func (t *texts) get(s span) string {
	if s.start == s.end {
		return ""
	}
	return t.all[s.start:s.end]
}

// Parse parses one call record (capture-format.md §1). The returned error,
// if any, is a *RecordError naming the field and the reason.
func (rp *RecordParser) Parse(data []byte, source string, line int) (*audit.Call, error) {
	c, err := rp.parse(data, source, line, true)
	if err != nil {
		return nil, err
	}
	cc := *c
	return &cc, nil
}

// Read parses one call record and has rd read the call from that parse,
// so that its JSON is parsed once. With keep false the call comes without
// its payloads (arguments, result, error data): where only its reading is
// needed (analyze), they are never copied. Errors are Parse's.
func (rp *RecordParser) Read(data []byte, source string, line int, rd *dialect.Reader, keep bool) (*audit.Record, error) {
	c, err := rp.parse(data, source, line, keep)
	if err != nil {
		return nil, err
	}
	r := rd.ReadCopy(c, &rp.payload)
	rp.payload = dialect.Payload{}
	return r, nil
}

// parse parses one call record into rp.call, which it returns, and leaves
// its parsed payloads in rp.payload until the next parse. The call is
// overwritten by the next parse: a caller keeps a copy.
func (rp *RecordParser) parse(data []byte, source string, line int, keep bool) (*audit.Call, error) {
	bad := func(field, format string, args ...any) error {
		return &RecordError{Source: source, Line: line, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	missing := func(field, reason string) error {
		return &RecordError{Source: source, Line: line, Field: field, Reason: reason, Kind: kindMissingField}
	}
	// A time or duration_ms that cannot be taken is the sender's clock or
	// encoder at fault, counted as a bad time, not as bad JSON.
	badTime := func(field, format string, args ...any) error {
		return &RecordError{Source: source, Line: line, Field: field, Reason: fmt.Sprintf(format, args...), Kind: kindBadTime}
	}
	rp.warns = rp.warns[:0]
	warn := func(kind, field string, offset int, format string, args ...any) {
		if len(rp.warns) < maxWarningsPerRecord {
			rp.warns = append(rp.warns, Warning{Source: source, Line: line, Field: field, Offset: offset, Kind: kind, Reason: fmt.Sprintf(format, args...)})
		}
	}
	v, err := rp.p.ParseBytes(data)
	if err != nil {
		return nil, bad("", "not JSON: %s", canon.ParseError(data, err))
	}
	// One walk checks that the record is JSON and that no object names a
	// member twice: the second is rare, and only then is the text read
	// again.
	once := canon.ValidOnce(v)
	if !once && !canon.Valid(v) {
		// NaN, Infinity, 1.2.3, a control byte or \x in a string:
		// fastjson takes them, JSON has none (capture-format.md §1: a line
		// that is not JSON is rejected).
		return nil, bad("", "not JSON: %s", canon.Fault(data))
	}
	if v.Type() != fastjson.TypeObject {
		return nil, bad("", "a call record must be a JSON object, not %s", v.Type())
	}
	if !once {
		// A name given twice is read as the MCP SDKs (Go, JavaScript,
		// Python) read it, the last copy, by every reader here: the
		// record's members, the dialect's reading, the canonical arguments
		// and the stored payloads. The earlier copies are blanked in a copy
		// of the record, where every offset stays as sent.
		rp.once = append(rp.once[:0], data...)
		rp.repeats = canon.KeepLast(rp.once, rp.repeats[:0], maxWarningsPerRecord)
		data = rp.once
		if v, err = rp.p.ParseBytes(data); err != nil {
			// Blanks in place of members leave JSON: not reached.
			return nil, bad("", "not JSON: %s", canon.ParseError(data, err))
		}
		for _, r := range rp.repeats {
			warn(WarnDuplicateName, r.Path, r.Second, "name given twice (byte offsets %d and %d): the last copy is read, as the MCP SDKs read it", r.First, r.Second)
		}
	}
	// The record's members, found in one pass over them rather than one
	// search each (no name is given twice by now).
	var top [nMembers]*fastjson.Value
	o, _ := v.Object()
	o.Visit(func(k []byte, x *fastjson.Value) {
		if i := memberOf(k); i >= 0 && top[i] == nil {
			top[i] = x
		}
	})
	c := &rp.call
	*c = audit.Call{}
	tx := &rp.text
	tx.reset()
	var srcSpan, serverSpan, rpcSpan, methodSpan, toolSpan span
	srcSpan.start = len(tx.buf)
	tx.buf = append(append(tx.buf, source...), ':')
	tx.buf = strconv.AppendInt(tx.buf, int64(line), 10)
	srcSpan.end = len(tx.buf)

	tv := top[mTime]
	if tv == nil {
		return nil, missing("time", "missing")
	}
	ts, err := tv.StringBytes()
	if err != nil {
		return nil, badTime("time", "must be an RFC 3339 string")
	}
	t, ok := parseUTCMicro(ts)
	if !ok {
		// The time text is read in place, without the copy a conversion to
		// string makes: time.Parse keeps its argument only in the error, which
		// is dropped here, and the UTC time keeps nothing of it.
		t, err = time.Parse(time.RFC3339Nano, unsafe.String(unsafe.SliceData(ts), len(ts)))
		if err != nil {
			e := badTime("time", "not an RFC 3339 time: %q", ts).(*RecordError)
			e.Value = string(ts[:min(len(ts), MaxLoggedValue)])
			return nil, e
		}
		// Most times are written to the microsecond or coarser: nothing to
		// round.
		if t = t.UTC(); t.Nanosecond()%1000 != 0 {
			t = t.Round(time.Microsecond)
		}
	}
	c.Time = t

	if serverSpan, err = optString(tx, top[mServer]); err != nil {
		return nil, bad("server", "%v", err)
	}
	if serverSpan.start == serverSpan.end {
		return nil, missing("server", "missing")
	}
	optional := [...]struct {
		name string
		m    int
		dst  *string
		at   span
	}{{name: "session", m: mSession, dst: &c.Session}, {name: "client", m: mClient, dst: &c.Client}, {name: "tenant", m: mTenant, dst: &c.Tenant},
		{name: "trace_id", m: mTraceID, dst: &c.TraceID}, {name: "span_id", m: mSpanID, dst: &c.SpanID}, {name: "transport_error", m: mTransportError, dst: &c.TransportError}}
	for i := range optional {
		f := &optional[i]
		if f.at, err = optString(tx, top[f.m]); err != nil {
			return nil, bad(f.name, "%v", err)
		}
	}
	if d := top[mDuration]; d != nil && d.Type() != fastjson.TypeNull {
		ms, err := d.Float64()
		if err != nil && !math.IsInf(ms, 1) || !(ms >= 0) {
			return nil, badTime("duration_ms", "must be a non-negative number")
		}
		if ms > maxDurationMS {
			// The conversion would wrap to a large negative duration.
			return nil, badTime("duration_ms", "%s ms is longer than a duration can hold (at most %d ms, about 292 years)", d, int64(maxDurationMS))
		}
		c.Duration = time.Duration(ms * float64(time.Millisecond))
	}

	req := top[mRequest]
	if req == nil {
		return nil, missing("request", "missing")
	}
	if req.Type() != fastjson.TypeObject {
		return nil, bad("request", "must be a JSON-RPC request object")
	}
	// Members of the wrong type are read as they always were, and named in
	// a warning (docs/api.md, "Members read leniently").
	idv := req.Get("id")
	if t := typeOf(idv); t != fastjson.TypeString && t != fastjson.TypeNumber && t != fastjson.TypeNull {
		warn(WarnWrongTypeID, "request.id", offsetOf(data, "request", "id"), "%s, not a string, number or null: its JSON text is read as the id", typeName(t))
	}
	rpcSpan = rpcID(tx, idv)
	if t := typeOf(req.Get("method")); t != fastjson.TypeString && t != fastjson.TypeNull {
		warn(WarnWrongTypeMethod, "request.method", offsetOf(data, "request", "method"), "%s, not a string: read as absent (tools/call)", typeName(t))
	}
	methodSpan = tx.add(req.GetStringBytes("method"))
	var args *fastjson.Value
	if params := req.Get("params"); params != nil {
		toolSpan = tx.add(params.GetStringBytes("name"))
		if a := params.Get("arguments"); a != nil && a.Type() != fastjson.TypeNull {
			args = a
			if t := a.Type(); t != fastjson.TypeObject {
				warn(WarnWrongTypeArguments, "request.params.arguments", offsetOf(data, "request", "params", "arguments"),
					"%s, not an object: kept as sent and hashed into the call id; no target or key is read from it", typeName(t))
			}
		}
	}
	method := tx.buf[methodSpan.start:methodSpan.end]
	if (len(method) == 0 || string(method) == "tools/call") && toolSpan.start == toolSpan.end {
		if n := req.Get("params", "name"); n != nil && n.Type() != fastjson.TypeString && n.Type() != fastjson.TypeNull {
			return nil, bad("request.params.name", "must be a string (the tool's name), not %s", n.Type())
		}
		return nil, missing("request.params.name", "missing tool name")
	}

	var result, errData *fastjson.Value
	if resp := top[mResponse]; resp != nil && resp.Type() != fastjson.TypeNull {
		if resp.Type() != fastjson.TypeObject {
			return nil, bad("response", "must be a JSON-RPC response object")
		}
		c.Responded = true
		if e := resp.Get("error"); e != nil && e.Type() != fastjson.TypeNull {
			if e.Type() != fastjson.TypeObject {
				return nil, bad("response.error", "must be an object")
			}
			re := &audit.RPCError{Message: string(e.GetStringBytes("message"))}
			if cv := e.Get("code"); cv != nil {
				code, err := cv.Int64()
				if err != nil {
					return nil, bad("response.error.code", "must be an integer")
				}
				re.Code = code
			}
			if d := e.Get("data"); d != nil && d.Type() != fastjson.TypeNull {
				errData = d
				if keep {
					re.Data = rawCopy(d, data, "response", "error", "data")
				}
			}
			c.Error = re
		} else if r := resp.Get("result"); r != nil && r.Type() != fastjson.TypeNull {
			result = r
			switch t := r.Type(); t {
			case fastjson.TypeObject:
				if t := typeOf(r.Get("isError")); t != fastjson.TypeTrue && t != fastjson.TypeFalse && t != fastjson.TypeNull {
					warn(WarnWrongTypeIsError, "response.result.isError", offsetOf(data, "response", "result", "isError"),
						"%s, not a boolean: read as false (no tool error)", typeName(t))
				}
			default:
				warn(WarnWrongTypeResult, "response.result", offsetOf(data, "response", "result"),
					"%s, not an object: kept as sent; read as a success with no content", typeName(t))
			}
		}
	}

	// Every check has passed: build the call.
	// Arguments sent sorted and compact, as most encoders send them, are
	// their own canonical form.
	var rawArgs []byte
	rawCanonical := false
	if keep {
		c.Arguments, c.Result = rawArgsResult(data, args, result)
		rawArgs = c.Arguments
		rawCanonical = rawArgs != nil && canon.Canonical(rawArgs)
	} else if args != nil {
		rawArgs, rawCanonical = canonicalArguments(data)
	}
	canonical := rp.canon[:0]
	switch {
	case args == nil:
	case rawCanonical:
		canonical = rawArgs
	default:
		rp.canon = canon.Append(rp.canon[:0], args)
		canonical = rp.canon
	}
	// The ids join the call's texts in their one allocation. A record
	// without a JSON-RPC id that names its span is identified by its span,
	// as the OTLP span of the same exchange is.
	server, session, tool := tx.view(serverSpan), tx.view(optional[0].at), tx.view(toolSpan)
	rpc := audit.IdentityRPC(tx.view(rpcSpan), tx.view(optional[3].at), tx.view(optional[4].at))
	idSpan, fpSpan := span{start: len(tx.buf)}, span{}
	tx.buf = audit.AppendStableID(tx.buf, server, session, rpc, c.Time, tool, canonical)
	idSpan.end, fpSpan.start = len(tx.buf), len(tx.buf)
	tx.buf = audit.AppendFingerprint(tx.buf, server, session, rpc, tool, canonical)
	fpSpan.end = len(tx.buf)

	tx.done()
	c.Source = tx.get(srcSpan)
	c.Server = tx.get(serverSpan)
	for i := range optional {
		*optional[i].dst = tx.get(optional[i].at)
	}
	c.RPCID = tx.get(rpcSpan)
	c.Method = tx.get(methodSpan)
	if c.Method == "" || c.Method == "tools/call" {
		c.Method = "tools/call"
	}
	c.Tool = tx.get(toolSpan)
	c.ID, c.Fingerprint = tx.get(idSpan), tx.get(fpSpan)
	c.RespSum = audit.ResponseSum(c, canon.Sum(result), canon.Sum(errData))
	rp.payload = dialect.Payload{Args: args, Result: result, ErrorData: errData, CanonicalArgs: canonical}
	if args == nil {
		rp.payload.CanonicalArgs = nil
	}
	return c, nil
}

// rawArguments returns the text of request.params.arguments in the record
// data, without a copy; nil when an escaped key on the way leaves it
// unknown.
func rawArguments(data []byte) []byte {
	v, ok := findPath(data, skipSpace(data, 0), "request", "params", "arguments")
	if !ok {
		return nil
	}
	return v
}

// canonicalArguments returns the text of request.params.arguments in the
// record data, without a copy, when it is its own canonical form
// (canon.Canonical); ok is false otherwise. An object or array is found
// and checked in one read of its text (canon.CanonicalPrefix), where
// rawArguments and canon.Canonical read it twice.
func canonicalArguments(data []byte) (args []byte, ok bool) {
	start, found := findPathStart(data, skipSpace(data, 0), "request", "params", "arguments")
	if !found {
		return nil, false
	}
	if n, ok := canon.CanonicalPrefix(data[start:]); ok {
		return data[start : start+n], true
	}
	if start < len(data) && (data[start] == '{' || data[start] == '[') {
		return nil, false
	}
	v := data[start:canon.ValueEnd(data, start)]
	return v, canon.Canonical(v)
}

// rawArgsResult returns copies of the text of the record's arguments and
// result, whose parsed values are args and result (nil when absent), in one
// allocation.
func rawArgsResult(data []byte, args, result *fastjson.Value) (a, r []byte) {
	if args == nil && result == nil {
		return nil, nil
	}
	arguments := [1]member{{key: "arguments"}}
	params := [1]member{{key: "params", sub: arguments[:]}}
	res := [1]member{{key: "result"}}
	top := [2]member{{key: "request", sub: params[:]}, {key: "response", sub: res[:]}}
	var ra, rr []byte
	if _, ok := findMembers(data, skipSpace(data, 0), top[:]); ok {
		ra, rr = arguments[0].val, res[0].val
	}
	// An escaped key on the way leaves the text unknown: the parsed value,
	// serialized again, stands in for it.
	if args != nil && ra == nil {
		ra = args.MarshalTo(nil)
	}
	if result != nil && rr == nil {
		rr = result.MarshalTo(nil)
	}
	buf := make([]byte, 0, len(ra)+len(rr))
	if args != nil {
		buf = append(buf, ra...)
		a = buf[:len(ra):len(ra)]
	}
	if result != nil {
		buf = append(buf, rr...)
		r = buf[len(buf)-len(rr):]
	}
	return a, r
}

// rawCopy returns a copy of the text of the value v found at keys in the
// record data.
func rawCopy(v *fastjson.Value, data []byte, keys ...string) []byte {
	raw := data
	for _, k := range keys {
		var ok bool
		if raw, ok = rawMember(raw, k); !ok || raw == nil {
			return v.MarshalTo(nil)
		}
	}
	return append([]byte(nil), raw...)
}

// Members of a call record that parse reads.
const (
	mTime = iota
	mServer
	mSession
	mClient
	mTenant
	mTraceID
	mSpanID
	mTransportError
	mDuration
	mRequest
	mResponse
	nMembers
)

// memberOf returns the member a record's key names, or -1.
func memberOf(k []byte) int {
	switch string(k) {
	case "time":
		return mTime
	case "server":
		return mServer
	case "session":
		return mSession
	case "client":
		return mClient
	case "tenant":
		return mTenant
	case "trace_id":
		return mTraceID
	case "span_id":
		return mSpanID
	case "transport_error":
		return mTransportError
	case "duration_ms":
		return mDuration
	case "request":
		return mRequest
	case "response":
		return mResponse
	}
	return -1
}

// optString adds the string value f (a record's member) to tx; absent and
// null are empty.
func optString(tx *texts, f *fastjson.Value) (span, error) {
	if f == nil || f.Type() == fastjson.TypeNull {
		return span{}, nil
	}
	b, err := f.StringBytes()
	if err != nil {
		return span{}, fmt.Errorf("must be a string, not %s", f.Type())
	}
	return tx.add(b), nil
}

// typeNull is what typeOf says of an absent member: absent and null are
// read alike.
const typeNull = fastjson.TypeNull

// typeOf returns the type of v, TypeNull when v is absent.
func typeOf(v *fastjson.Value) fastjson.Type {
	if v == nil {
		return typeNull
	}
	return v.Type()
}

// typeName names a JSON type for a warning: "a string", "an object".
func typeName(t fastjson.Type) string {
	switch t {
	case fastjson.TypeObject:
		return "an object"
	case fastjson.TypeArray:
		return "an array"
	case fastjson.TypeString:
		return "a string"
	case fastjson.TypeNumber:
		return "a number"
	case fastjson.TypeTrue, fastjson.TypeFalse:
		return "a boolean"
	}
	return "null"
}

// offsetOf returns the byte offset in the record data of the value at
// path, -1 when it cannot be found (an escaped name on the way).
func offsetOf(data []byte, path ...string) int {
	start, found := findPathStart(data, skipSpace(data, 0), path...)
	if !found {
		return -1
	}
	return start
}

// rpcID renders a JSON-RPC id as text: numbers by their text, strings as
// they are, so that OTLP's string attribute and the record's number agree.
func rpcID(tx *texts, v *fastjson.Value) span {
	if v == nil {
		return span{}
	}
	switch v.Type() {
	case fastjson.TypeString:
		return tx.add(v.GetStringBytes())
	case fastjson.TypeNull:
		return span{}
	}
	s := span{start: len(tx.buf)}
	tx.buf = v.MarshalTo(tx.buf)
	s.end = len(tx.buf)
	return s
}
