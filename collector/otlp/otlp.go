// Package otlp turns OTLP trace data that follows the OpenTelemetry MCP
// semantic conventions into audit calls. Decoding is done by the Collector's
// pdata library; this package only reads spans.
package otlp

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Attribute names of the MCP semantic conventions, each followed by the
// aliases seen in the wild that are read when the semconv name is absent.
var (
	attrMethod    = []string{"mcp.method.name", "mcp.method", "rpc.method"}
	attrTool      = []string{"gen_ai.tool.name", "mcp.tool.name", "tool.name"}
	attrSession   = []string{"mcp.session.id", "mcp.session_id", "mcp.sessionId", "session.id"}
	attrRequestID = []string{"jsonrpc.request.id", "mcp.request.id", "rpc.jsonrpc.request_id"}
	attrArgs      = []string{"gen_ai.tool.call.arguments", "mcp.tool.arguments", "mcp.request.arguments"}
	attrResult    = []string{"gen_ai.tool.call.result", "mcp.tool.result", "mcp.response.result"}
	attrRPCCode   = []string{"rpc.response.status_code", "rpc.jsonrpc.error_code", "jsonrpc.error.code"}
	attrRPCMsg    = []string{"rpc.jsonrpc.error_message", "jsonrpc.error.message"}
	attrClient    = []string{"mcp.client.name", "client.name", "gen_ai.agent.name"}
	attrTenant    = []string{"mcpaudit.tenant", "tenant.id"}
	attrServer    = []string{"server.address", "mcp.server.name"}
)

// RejectedSpan says why one span could not be used.
type RejectedSpan struct {
	// Path locates the span: resourceSpans[i].scopeSpans[j].spans[k].
	Path   string
	Reason string
}

func (r RejectedSpan) Error() string { return r.Path + ": " + r.Reason }

// Result is what Convert made of one batch of spans.
type Result struct {
	Calls []*audit.Call
	// Sources names, for each call, the stream it came on: the resource
	// that exported it (see SourceOf).
	Sources  []string
	Rejected []RejectedSpan
	// Ignored counts spans that are not tools/call (initialize, tools/list...).
	Ignored int
}

// Convert reads every span of td. source prefixes each call's Source.
// Spans that are not tools/call are counted in Ignored; spans that are but
// lack what a call needs are listed in Rejected, and the others are kept.
func Convert(td ptrace.Traces, source string) Result {
	var res Result
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		rattrs := rs.Resource().Attributes()
		service := str(rattrs, "service.name")
		rtenant := first(rattrs, attrTenant)
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

// SourceOf names the stream a resource's spans come on: one exporter of
// one process, told by service.name, service.instance.id and host.name
// ("otlp:thegram/pod-7/node-3", the parts it has). Each such stream holds
// back the event time of the partitions its calls are for, apart from the
// others.
func SourceOf(rattrs pcommon.Map) string {
	b := []byte("otlp:")
	n := len(b)
	for _, k := range [...]string{"service.name", "service.instance.id", "host.name"} {
		if v := str(rattrs, k); v != "" {
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

// convertSpan returns (call, true, "") for a usable tools/call span,
// (nil, false, "") for a span of another method and a reason otherwise.
func convertSpan(sp ptrace.Span, service, rtenant string) (*audit.Call, bool, string) {
	attrs := sp.Attributes()
	method := first(attrs, attrMethod)
	tool := first(attrs, attrTool)
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
		if s := first(attrs, attrServer); s != "" {
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
		Session: first(attrs, attrSession),
		Client:  first(attrs, attrClient),
		Tenant:  first(attrs, attrTenant),
		Method:  method,
		Tool:    tool,
		RPCID:   first(attrs, attrRequestID),
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
	if a := first(attrs, attrArgs); a != "" {
		c.Arguments = []byte(a)
		if !validJSON(c.Arguments) {
			return nil, false, "gen_ai.tool.call.arguments is not JSON"
		}
	}
	if r := first(attrs, attrResult); r != "" {
		c.Result = []byte(r)
		if !validJSON(c.Result) {
			return nil, false, "gen_ai.tool.call.result is not JSON"
		}
		c.Responded = true
	}
	errType := first(attrs, []string{"error.type"})
	rpcCode := first(attrs, attrRPCCode)
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
		msg := first(attrs, attrRPCMsg)
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

func first(m pcommon.Map, keys []string) string {
	for _, k := range keys {
		if s := str(m, k); s != "" {
			return s
		}
	}
	return ""
}

func str(m pcommon.Map, k string) string {
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
