package otlp

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/valyala/fastjson"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// ConvertResult is what Convert made of one batch of spans.
//
// Deprecated: Read reads each call once, into its record.
type ConvertResult struct {
	Calls    []*audit.Call
	Sources  []string
	Rejected []RejectedSpan
	Ignored  int
}

// Convert is the conversion before Read, kept until the receiver uses
// Read: it turns spans into calls to be read again, and an error span
// without its result into a made-up result.
//
// Deprecated: use Read.
// It reads every span of td; source prefixes each call's Source.
// Spans that are not tools/call are counted in Ignored; spans that are but
// lack what a call needs are listed in Rejected, and the others are kept.
func Convert(td ptrace.Traces, source string) ConvertResult {
	var res ConvertResult
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		rattrs := rs.Resource().Attributes()
		service := legacyStr(rattrs, "service.name")
		rtenant := legacyFirst(rattrs, attrNames[attrTenant])
		src := SourceOf(rattrs)
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				path := fmt.Sprintf("resourceSpans[%d].scopeSpans[%d].spans[%d]", i, j, k)
				c, ok, reason := convertSpan(spans.At(k), service, rtenant)
				switch {
				case reason != "":
					res.Rejected = append(res.Rejected, RejectedSpan{Path: path, Reason: reason})
				case !ok:
					res.Ignored++
				default:
					c.Source = source + path
					res.Calls = append(res.Calls, c)
					res.Sources = append(res.Sources, src)
				}
			}
		}
	}
	return res
}

// convertSpan returns (call, true, "") for a usable tools/call span,
// (nil, false, "") for a span of another method and a reason otherwise.
func convertSpan(sp ptrace.Span, service, rtenant string) (*audit.Call, bool, string) {
	attrs := sp.Attributes()
	method := legacyFirst(attrs, attrNames[attrMethod])
	tool := legacyFirst(attrs, attrNames[attrTool])
	if method == "" && tool != "" {
		method = "tools/call"
	}
	if method != "tools/call" {
		return nil, false, ""
	}
	if tool == "" {
		return nil, false, "tools/call span without gen_ai.tool.name"
	}
	server := service
	if sp.Kind() == ptrace.SpanKindClient || server == "" {
		if s := legacyFirst(attrs, attrNames[attrServer]); s != "" {
			server = s
		}
	}
	if server == "" {
		return nil, false, "no server identity: neither resource service.name nor server.address"
	}
	start := sp.StartTimestamp()
	if start == 0 {
		return nil, false, "span without start time"
	}
	c := &audit.Call{
		// OTLP exporters that go through floating point land a few hundred
		// nanoseconds off; microseconds are what both carriers agree on.
		Time:    start.AsTime().UTC().Round(time.Microsecond),
		Server:  server,
		Session: legacyFirst(attrs, attrNames[attrSession]),
		Client:  legacyFirst(attrs, attrNames[attrClient]),
		Tenant:  legacyFirst(attrs, attrNames[attrTenant]),
		Method:  method,
		Tool:    tool,
		RPCID:   legacyFirst(attrs, attrNames[attrRequestID]),
	}
	if c.Tenant == "" {
		c.Tenant = rtenant
	}
	if sp.Kind() == ptrace.SpanKindClient && c.Client == "" {
		c.Client = service
	}
	if end := sp.EndTimestamp(); end > start {
		c.Duration = end.AsTime().Sub(start.AsTime())
	}
	if tid := sp.TraceID(); !tid.IsEmpty() {
		c.TraceID = tid.String()
	}
	if sid := sp.SpanID(); !sid.IsEmpty() {
		c.SpanID = sid.String()
	}
	if a := legacyFirst(attrs, attrNames[attrArgs]); a != "" {
		c.Arguments = []byte(a)
		if fastjson.ValidateBytes(c.Arguments) != nil {
			return nil, false, "gen_ai.tool.call.arguments is not JSON"
		}
	}
	if r := legacyFirst(attrs, attrNames[attrResult]); r != "" {
		c.Result = []byte(r)
		if fastjson.ValidateBytes(c.Result) != nil {
			return nil, false, "gen_ai.tool.call.result is not JSON"
		}
		c.Responded = true
	}
	errType := legacyFirst(attrs, []string{"error.type"})
	rpcCode := legacyFirst(attrs, attrNames[attrRPCCode])
	if rpcCode == "" {
		if _, err := strconv.ParseInt(errType, 10, 64); err == nil {
			rpcCode = errType
		}
	}
	switch {
	case c.Result != nil:
	case rpcCode != "":
		code, err := strconv.ParseInt(rpcCode, 10, 64)
		if err != nil {
			return nil, false, "JSON-RPC error code " + strconv.Quote(rpcCode) + " is not an integer"
		}
		msg := legacyFirst(attrs, attrNames[attrRPCMsg])
		if msg == "" {
			msg = sp.Status().Message()
		}
		c.Error = &audit.RPCError{Code: code, Message: msg}
		c.Responded = true
	case errType == "tool_error":
		// A tool error whose result was not recorded: the call answered
		// with isError, content unknown.
		c.Result = []byte(`{"isError":true}`)
		c.Responded = true
	case errType == "E_APP_NOT_RUNNING":
		// The Thegram desktop helper's JSON-RPC -32000, recorded by its code.
		c.Error = &audit.RPCError{Code: -32000, Message: sp.Status().Message(), Data: []byte(`{"code":` + strconv.Quote(errType) + `}`)}
		c.Responded = true
	case isServerCode(errType):
		// A tool error recorded by its code, without the opt-in result: the
		// call answered isError with that code.
		c.Result = []byte(`{"isError":true,"structuredContent":{"error":{"code":` + strconv.Quote(errType) +
			`,"message":` + strconv.Quote(sp.Status().Message()) + `}}}`)
		c.Responded = true
	case errType != "":
		c.TransportError = errType
	case sp.Status().Code() == ptrace.StatusCodeError && errType == "":
		// An error status with nothing else: the instrumentation saw the
		// exchange fail without an answer.
		c.TransportError = strings.ToLower(firstNonEmpty(sp.Status().Message(), "error"))
	case c.Arguments != nil && sp.Status().Code() != ptrace.StatusCodeOk:
		// The instrumentation records the opt-in payloads (it recorded the
		// arguments) but recorded no result and no error: no response was
		// observed, as for a call record with neither response nor
		// transport_error.
	default:
		// A completed exchange whose payloads were not recorded (they are
		// opt-in): it answered, with content unknown.
		c.Responded = true
	}
	args := canon.Bytes(c.Arguments)
	// Without a JSON-RPC id the span id tells one exchange from another:
	// spans of one tool with equal arguments in one second are not one
	// exchange seen twice.
	rpc := c.RPCID
	if rpc == "" && c.SpanID != "" {
		rpc = "span:" + c.TraceID + c.SpanID
	}
	c.ID = audit.StableID(c.Server, c.Session, rpc, c.Time, c.Tool, args)
	c.Fingerprint = audit.Fingerprint(c.Server, c.Session, rpc, c.Tool, args)
	return c, true, ""
}

func legacyFirst(m pcommon.Map, keys []string) string {
	for _, k := range keys {
		if s := legacyStr(m, k); s != "" {
			return s
		}
	}
	return ""
}

func legacyStr(m pcommon.Map, k string) string {
	v, ok := m.Get(k)
	if !ok {
		return ""
	}
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return v.Str()
	case pcommon.ValueTypeInt, pcommon.ValueTypeDouble, pcommon.ValueTypeBool:
		return v.AsString()
	case pcommon.ValueTypeMap, pcommon.ValueTypeSlice:
		// Some instrumentations record arguments as structured values.
		return v.AsString()
	}
	return ""
}
