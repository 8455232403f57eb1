// Package otlp turns OTLP trace data that follows the OpenTelemetry MCP
// semantic conventions into audit records: each tools/call span becomes a
// call, read by its dialect from the one parse of its payloads.
//
// Spans come decoded by the Collector's pdata library (OTLP protobuf and
// JSON requests, Read), read straight from an OTLP protobuf message
// (CheckProto and Converter.ReadProto, what the receiver does with the
// messages pdata is not needed for), or parsed one at a time out of an
// OTLP JSON document (Converter.JSONSpan, for inputs too large to decode
// whole); all read the same fields with the same rules.
package otlp

import (
	"math"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/valyala/fastjson"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Attributes the conversion reads: each is a group of names, the MCP
// semantic conventions' name first, then the aliases seen in the wild,
// read when the names before them are absent or empty.
const (
	attrMethod = iota
	attrTool
	attrSession
	attrRequestID
	attrArgs
	attrResult
	attrRPCCode
	attrRPCMsg
	attrClient
	attrTenant
	attrServer
	attrErrorType
	numAttrs
)

var attrNames = [numAttrs][]string{
	attrMethod:    {"mcp.method.name", "mcp.method", "rpc.method"},
	attrTool:      {"gen_ai.tool.name", "mcp.tool.name", "tool.name"},
	attrSession:   {"mcp.session.id", "mcp.session_id", "mcp.sessionId", "session.id"},
	attrRequestID: {"jsonrpc.request.id", "mcp.request.id", "rpc.jsonrpc.request_id"},
	attrArgs:      {"gen_ai.tool.call.arguments", "mcp.tool.arguments", "mcp.request.arguments"},
	attrResult:    {"gen_ai.tool.call.result", "mcp.tool.result", "mcp.response.result"},
	attrRPCCode:   {"rpc.response.status_code", "rpc.jsonrpc.error_code", "jsonrpc.error.code"},
	attrRPCMsg:    {"rpc.jsonrpc.error_message", "jsonrpc.error.message"},
	attrClient:    {"mcp.client.name", "client.name", "gen_ai.agent.name"},
	attrTenant:    {"mcpaudit.tenant", "tenant.id"},
	attrServer:    {"server.address", "mcp.server.name"},
	attrErrorType: {"error.type"},
}

// Resource attributes: the service, the tenant group, and the parts of a
// source's name (SourceOf).
const (
	resService = iota
	resTenant
	resInstance
	resHost
	numResAttrs
)

var resNames = [numResAttrs][]string{
	resService:  {"service.name"},
	resTenant:   {"mcpaudit.tenant", "tenant.id"},
	resInstance: {"service.instance.id"},
	resHost:     {"host.name"},
}

// attrRef places one attribute name: its group, its rank in the group and
// its index among all names (a bit of attrs.seen).
type attrRef struct{ group, rank, bit uint8 }

func refsOf(groups [][]string) map[string]attrRef {
	m := map[string]attrRef{}
	bit := 0
	for g, names := range groups {
		for r, n := range names {
			m[n] = attrRef{uint8(g), uint8(r), uint8(bit)}
			bit++
		}
	}
	return m
}

var (
	spanRefs = refsOf(attrNames[:])
	resRefs  = refsOf(resNames[:])
)

// attrs holds, for each group, the value of its best-ranked name whose
// value is not empty, taking the first occurrence of a name repeated in
// one attribute list (as pcommon.Map.Get does). One pass over a span's
// attributes fills it.
type attrs struct {
	val  [numAttrs]string
	rank [numAttrs]uint8 // rank+1 of the name val came from; 0 for none
	seen uint64
}

func (a *attrs) reset() { *a = attrs{} }

// wants reports whether the attribute key must be read: a name of a group,
// seen for the first time, ranked before the group's value so far.
func (a *attrs) wants(refs map[string]attrRef, key string) (attrRef, bool) {
	ref, ok := refs[key]
	if !ok || a.seen&(1<<ref.bit) != 0 {
		return ref, false
	}
	a.seen |= 1 << ref.bit
	return ref, a.rank[ref.group] == 0 || ref.rank+1 < a.rank[ref.group]
}

// set records the value of a wanted attribute; an empty value leaves the
// group to the names after it.
func (a *attrs) set(ref attrRef, v string) {
	if v != "" {
		a.val[ref.group], a.rank[ref.group] = v, ref.rank+1
	}
}

// RejectedSpan says why one span could not be used.
type RejectedSpan struct {
	// Path locates the span: resourceSpans[i].scopeSpans[j].spans[k].
	Path string
	// Reason says why, in words for the sender and the log.
	Reason string
	// Kind is the reason the span is counted under in
	// mcpaudit_ingest_rejected_total (one of exporter/metrics'
	// RejectReasons), set where the span is rejected, so that a count
	// never depends on Reason's wording; empty is bad_span, a span that
	// cannot be read as a call.
	Kind string
}

// KindBadTime is the Kind of a span whose times cannot be taken (a start
// or end time field that cannot be read, a start of 0, an end before the
// start): exporter/metrics' RejectBadTime, as a call record with a bad
// time is counted.
const KindBadTime = "bad_time"

// KindTooDeep is the Kind of a span whose attribute value nests deeper than
// can be read: exporter/metrics' RejectTooDeep, as serve counts a value
// nested past serve.receiver.max_depth.
const KindTooDeep = "too_deep"

func (r RejectedSpan) Error() string { return r.Path + ": " + r.Reason }

// CountedAs is the reason the span is counted under: its Kind, bad_span
// when it has none.
func (r RejectedSpan) CountedAs() string {
	if r.Kind == "" {
		return "bad_span"
	}
	return r.Kind
}

// Resource is what the conversion reads of a resource.
type Resource struct {
	// Service is service.name.
	Service string
	// Tenant is the resource's tenant attribute, for spans without one.
	Tenant string
	// Source names the stream the resource's spans come on (SourceOf).
	Source string
}

// resourceOf makes a Resource from its attribute groups.
func resourceOf(a *attrs) Resource {
	return Resource{Service: a.val[resService], Tenant: a.val[resTenant], Source: sourceName(a.val[resService], a.val[resInstance], a.val[resHost])}
}

// SourceOf names the stream a resource's spans come on: one exporter of
// one process, told by service.name, service.instance.id and host.name
// ("otlp:thegram/pod-7/node-3", the parts it has). Each such stream holds
// back the event time of the partitions its calls are for, apart from the
// others.
func SourceOf(rattrs pcommon.Map) string {
	return ResourceOf(rattrs).Source
}

func sourceName(parts ...string) string {
	b := []byte("otlp:")
	n := len(b)
	for _, v := range parts {
		if v != "" {
			if len(b) > n {
				b = append(b, '/')
			}
			b = append(b, v...)
		}
	}
	if len(b) == n {
		b = append(b, "unnamed"...)
	}
	return string(b)
}

// spanFields is what the conversion reads of one span, whichever encoding
// carried it. Its strings may alias the decoder's memory: the call is
// built from copies.
type spanFields struct {
	kind       ptrace.SpanKind
	start, end pcommon.Timestamp
	traceID    pcommon.TraceID
	spanID     pcommon.SpanID
	status     ptrace.StatusCode
	message    string
	attrs      attrs
}

// Converter reads spans into records. It reuses its parsers and buffers:
// it is not safe for concurrent use, and the records it returns share
// nothing with it.
type Converter struct {
	args, result fastjson.Parser
	canon        []byte
	text         []byte
	sp           spanFields
	res          attrs
	payload      dialect.Payload
	// known is what the last span told beside its payloads.
	known dialect.Known
	// spans counts the spans CheckProto walked.
	spans int
	// Keep keeps each call's payloads (arguments, result) as sent; false
	// leaves them out once read, where only the reading is needed.
	Keep bool
}

// Known returns what the last span read told beside its payloads, for a
// reader that reads its call again (dialect.Reader.ReadKnown).
func (cv *Converter) Known() dialect.Known { return cv.known }

// NewConverter returns a converter that keeps payloads.
func NewConverter() *Converter { return &Converter{Keep: true} }

// path is where a span is in its document.
type path struct{ rs, ss, sp int }

func (p path) appendTo(b []byte) []byte {
	b = append(b, "resourceSpans["...)
	b = strconv.AppendInt(b, int64(p.rs), 10)
	b = append(b, "].scopeSpans["...)
	b = strconv.AppendInt(b, int64(p.ss), 10)
	b = append(b, "].spans["...)
	b = strconv.AppendInt(b, int64(p.sp), 10)
	return append(b, ']')
}

func (p path) String() string { return string(p.appendTo(nil)) }

// field locates one text of the call in Converter.text.
type field struct{ start, end int }

func (cv *Converter) add(s string) field {
	f := field{start: len(cv.text)}
	cv.text = append(cv.text, s...)
	f.end = len(cv.text)
	return f
}

// convert reads cv.sp, of resource res at p in a document named source,
// and returns its record; ignored for a span of another method, or the
// reason it cannot be used. rd nil leaves the record without a reading.
//
// kind, beside a reason, is the RejectedSpan.Kind it is counted under
// (empty: bad_span).
func (cv *Converter) convert(res *Resource, source string, p path, rd *dialect.Reader) (rec *audit.Record, ignored bool, reason, kind string) {
	sp := &cv.sp
	a := &sp.attrs.val
	method, tool := a[attrMethod], a[attrTool]
	if method == "" && tool != "" {
		method = "tools/call"
	}
	if method != "tools/call" {
		return nil, true, "", ""
	}
	if tool == "" {
		return nil, false, "tools/call span without gen_ai.tool.name", ""
	}
	server := res.Service
	if sp.kind == ptrace.SpanKindClient || server == "" {
		if s := a[attrServer]; s != "" {
			server = s
		}
	}
	if server == "" {
		return nil, false, "no server identity: neither resource service.name nor server.address", ""
	}
	if sp.start == 0 {
		// A call is dated by its start: as a record without a time.
		return nil, false, "span without start time", KindBadTime
	}
	var args, result *fastjson.Value
	var err error
	if s := a[attrArgs]; s != "" {
		if args, err = cv.args.Parse(s); err != nil {
			return nil, false, "gen_ai.tool.call.arguments is not JSON: " + canon.ParseError([]byte(s), err), ""
		}
		if !canon.Valid(args) {
			return nil, false, "gen_ai.tool.call.arguments is not JSON: " + canon.Fault(textBytes(s)), ""
		}
	}
	if s := a[attrResult]; s != "" {
		if result, err = cv.result.Parse(s); err != nil {
			return nil, false, "gen_ai.tool.call.result is not JSON: " + canon.ParseError([]byte(s), err), ""
		}
		if !canon.Valid(result) {
			return nil, false, "gen_ai.tool.call.result is not JSON: " + canon.Fault(textBytes(s)), ""
		}
	}

	c := &audit.Call{
		// OTLP exporters that go through floating point land a few hundred
		// nanoseconds off; microseconds are what both carriers agree on.
		Time:      sp.start.AsTime().UTC().Round(time.Microsecond),
		Method:    "tools/call",
		Responded: result != nil,
	}
	switch end := sp.end; {
	case sp.start > math.MaxInt64:
		// Read as a time before 1970, it would make the span end
		// "-499048h7m30s before it starts" (adv22).
		return nil, false, "field start_time_unix_nano: " + strconv.FormatUint(uint64(sp.start), 10) +
			" ns after the Unix epoch is outside 1678-2261, which cannot be stored", KindBadTime
	case end > math.MaxInt64:
		// Past what a time holds (2262-04-11): pdata reads it as a time
		// before 1970, and the duration would be negative.
		return nil, false, "field end_time_unix_nano: " + strconv.FormatUint(uint64(end), 10) +
			" ns after the Unix epoch is outside 1678-2261, which cannot be stored", KindBadTime
	case end > sp.start:
		c.Duration = end.AsTime().Sub(sp.start.AsTime())
	case end != 0 && end < sp.start:
		// A span that ends before it starts has no duration to take, as a
		// call record's negative duration_ms has none. An end of 0 is an
		// end not recorded: the duration is unknown (0).
		return nil, false, "field end_time_unix_nano: the span ends " + sp.start.AsTime().Sub(end.AsTime()).String() +
			" before it starts (start_time_unix_nano)", KindBadTime
	}
	cv.payload = dialect.Payload{Args: args, Result: result}
	cv.text = cv.text[:0]
	fSource := field{start: len(cv.text)}
	cv.text = append(cv.text, source...)
	cv.text = p.appendTo(cv.text)
	fSource.end = len(cv.text)
	fServer, fTool := cv.add(server), cv.add(tool)
	fSession, fClient := cv.add(a[attrSession]), cv.add(a[attrClient])
	tenant := a[attrTenant]
	if tenant == "" {
		tenant = res.Tenant
	}
	fTenant, fRPC := cv.add(tenant), cv.add(a[attrRequestID])
	if sp.kind == ptrace.SpanKindClient && fClient.start == fClient.end {
		fClient = cv.add(res.Service)
	}
	var fTrace, fSpan, fTransport field
	if !sp.traceID.IsEmpty() {
		fTrace.start = len(cv.text)
		cv.text = appendHex(cv.text, sp.traceID[:])
		fTrace.end = len(cv.text)
	}
	if !sp.spanID.IsEmpty() {
		fSpan.start = len(cv.text)
		cv.text = appendHex(cv.text, sp.spanID[:])
		fSpan.end = len(cv.text)
	}

	errType := a[attrErrorType]
	rpcCode := a[attrRPCCode]
	if rpcCode == "" && errType != "" && (errType[0] == '-' || errType[0] == '+' || errType[0] >= '0' && errType[0] <= '9') {
		// (Only what may be a number is parsed: ParseInt allocates its
		// error, and most error.type values are words or absent.)
		if _, err := strconv.ParseInt(errType, 10, 64); err == nil {
			rpcCode = errType
		}
	}
	switch {
	case result != nil:
	case rpcCode != "":
		code, err := strconv.ParseInt(rpcCode, 10, 64)
		if err != nil {
			return nil, false, "JSON-RPC error code " + strconv.Quote(rpcCode) + " is not an integer", ""
		}
		msg := a[attrRPCMsg]
		if msg == "" {
			msg = sp.message
		}
		c.Error = &audit.RPCError{Code: code, Message: strings.Clone(msg)}
		c.Responded = true
	case errType == "tool_error":
		// A tool error whose result was not recorded: the call answered
		// with isError, content unknown.
		cv.payload.ToolError = &dialect.ToolError{}
		c.Responded = true
	case errType == "E_APP_NOT_RUNNING":
		// The Thegram desktop helper's JSON-RPC -32000, recorded by its code.
		c.Error = &audit.RPCError{Code: -32000, Message: strings.Clone(sp.message)}
		cv.payload.ErrorDataCode = "E_APP_NOT_RUNNING"
		c.Responded = true
	case isServerCode(errType):
		// A tool error recorded by its code, without the opt-in result: the
		// call answered isError with that code.
		cv.payload.ToolError = &dialect.ToolError{Code: strings.Clone(errType), Message: strings.Clone(sp.message)}
		c.Responded = true
	case errType != "":
		fTransport = cv.add(errType)
	case sp.status == ptrace.StatusCodeError:
		// An error status with nothing else: the instrumentation saw the
		// exchange fail without an answer.
		fTransport.start = len(cv.text)
		cv.text = append(cv.text, strings.ToLower(firstNonEmpty(sp.message, "error"))...)
		fTransport.end = len(cv.text)
	case args != nil && sp.status != ptrace.StatusCodeOk:
		// The instrumentation records the opt-in payloads (it recorded the
		// arguments) but recorded no result and no error: no response was
		// observed, as for a call record with neither response nor
		// transport_error.
	default:
		// A completed exchange whose payloads were not recorded (they are
		// opt-in): it answered, with content unknown.
		c.Responded = true
	}

	canonical := cv.canonical(a[attrArgs], args)
	// Without a JSON-RPC id the span id tells one exchange from another:
	// spans of one tool with equal arguments in one second are not one
	// exchange seen twice.
	view := func(f field) string { return b2s(cv.text[f.start:f.end]) }
	rpc := audit.IdentityRPC(view(fRPC), view(fTrace), view(fSpan))
	server, session, tool := view(fServer), view(fSession), view(fTool)
	fID := field{start: len(cv.text)}
	cv.text = audit.AppendStableID(cv.text, server, session, rpc, c.Time, tool, canonical)
	fID.end = len(cv.text)
	fFP := field{start: fID.end}
	cv.text = audit.AppendFingerprint(cv.text, server, session, rpc, tool, canonical)
	fFP.end = len(cv.text)

	// The call's texts share one allocation; the payloads another.
	all := string(cv.text)
	get := func(f field) string { return all[f.start:f.end] }
	c.Source, c.Server, c.Tool, c.Session, c.Client = get(fSource), get(fServer), get(fTool), get(fSession), get(fClient)
	c.Tenant, c.RPCID, c.TraceID, c.SpanID, c.TransportError = get(fTenant), get(fRPC), get(fTrace), get(fSpan), get(fTransport)
	c.ID, c.Fingerprint = get(fID), get(fFP)
	if result != nil {
		// The response is known only where the opt-in result is recorded,
		// and then it sums as a call record's response.result does: the
		// same exchange on both carriers has one sum. A span that records
		// an error code, or no payload, says too little of its response to
		// tell it from another (its sum is unknown, 0).
		c.RespSum = audit.ResponseSum(c, canon.Sum(result), 0)
	}
	if cv.Keep && (args != nil || result != nil) {
		sa, sr := a[attrArgs], a[attrResult]
		buf := make([]byte, 0, len(sa)+len(sr))
		if args != nil {
			buf = append(buf, sa...)
			c.Arguments = buf[:len(sa):len(sa)]
		}
		if result != nil {
			buf = append(buf, sr...)
			c.Result = buf[len(buf)-len(sr):]
		}
	}
	cv.known = cv.payload.Known
	if rd == nil {
		return &audit.Record{Call: c}, false, "", ""
	}
	cv.payload.CanonicalArgs = canonical
	rec = rd.ReadPayload(c, &cv.payload)
	cv.payload = dialect.Payload{}
	return rec, false, "", ""
}

// canonical returns the canonical JSON of the arguments raw, parsed into
// v: raw itself when it is already canonical.
func (cv *Converter) canonical(raw string, v *fastjson.Value) []byte {
	if v == nil {
		return nil
	}
	if b := unsafe.Slice(unsafe.StringData(raw), len(raw)); canon.Canonical(b) {
		return b
	}
	cv.canon = canon.Append(cv.canon[:0], v)
	return cv.canon
}

func appendHex(dst, b []byte) []byte {
	const digits = "0123456789abcdef"
	for _, c := range b {
		dst = append(dst, digits[c>>4], digits[c&0xf])
	}
	return dst
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// isServerCode reports whether s looks like a server error code: upper
// case words joined by underscores (E_STORAGE, COMMIT_UNKNOWN,
// STALE_REVISION), as opposed to a transport error (timeout).
func isServerCode(s string) bool {
	if !strings.Contains(s, "_") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'A' && c <= 'Z' || c == '_') {
			return false
		}
	}
	return true
}

// textBytes returns the bytes of s without a copy, for reading only.
func textBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
