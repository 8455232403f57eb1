package capgen

import (
	"encoding/binary"
	"hash/fnv"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// ScopeName is the instrumentation scope of the generated spans.
const ScopeName = "mcpaudit/capgen"

// AppendTraces appends calls to td as MCP servers export their spans: one
// resource per server (service.name), each with service.instance.id set
// to instance when it is not empty, so that every instance is a source of
// its own.
func AppendTraces(td ptrace.Traces, instance string, calls []*Call) {
	type group struct {
		server string
		spans  ptrace.SpanSlice
	}
	var groups []group
	for _, c := range calls {
		i := 0
		for i < len(groups) && groups[i].server != c.Server {
			i++
		}
		if i == len(groups) {
			rs := td.ResourceSpans().AppendEmpty()
			attrs := rs.Resource().Attributes()
			attrs.PutStr("service.name", c.Server)
			if instance != "" {
				attrs.PutStr("service.instance.id", instance)
			}
			ss := rs.ScopeSpans().AppendEmpty()
			ss.Scope().SetName(ScopeName)
			groups = append(groups, group{c.Server, ss.Spans()})
		}
		c.AppendSpan(groups[i].spans)
	}
}

// AppendSpan appends c to spans as the server span an MCP server's
// instrumentation records of it, with the attributes of the OpenTelemetry
// MCP semantic conventions and the opt-in arguments and result. A bad call
// becomes a span the collector must reject: a tools/call span without its
// start time, its tool name or JSON arguments.
func (c *Call) AppendSpan(spans ptrace.SpanSlice) {
	sp := spans.AppendEmpty()
	sp.SetKind(ptrace.SpanKindServer)
	sp.SetTraceID(c.traceID())
	sp.SetSpanID(c.spanID())
	attrs := sp.Attributes()
	attrs.EnsureCapacity(8)
	attrs.PutStr("mcp.method.name", "tools/call")
	start := pcommon.NewTimestampFromTime(c.Time)
	if c.Kind == KindBad {
		sp.SetName("tools/call")
		switch c.bad % 3 {
		case 0:
			attrs.PutStr("gen_ai.tool.name", "gram_read")
			start = 0
		case 1:
			// No tool name.
		case 2:
			attrs.PutStr("gen_ai.tool.name", "gram_read")
			attrs.PutStr("gen_ai.tool.call.arguments", "this is not json")
		}
		sp.SetStartTimestamp(start)
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(c.Time.Add(c.Duration)))
		return
	}
	sp.SetName("tools/call " + c.Tool)
	sp.SetStartTimestamp(start)
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(c.Time.Add(c.Duration)))
	attrs.PutStr("gen_ai.tool.name", c.Tool)
	attrs.PutStr("gen_ai.operation.name", "execute_tool")
	attrs.PutStr("jsonrpc.request.id", strconv.Itoa(c.RPCID))
	attrs.PutStr("mcp.session.id", c.Session)
	if c.Tenant != "" {
		attrs.PutStr("mcpaudit.tenant", c.Tenant)
	}
	attrs.PutStr("gen_ai.tool.call.arguments", c.Arguments)
	switch {
	case c.TransportError != "":
		attrs.PutStr("error.type", c.TransportError)
		sp.Status().SetCode(ptrace.StatusCodeError)
		sp.Status().SetMessage(c.TransportError)
	case c.Result != "":
		attrs.PutStr("gen_ai.tool.call.result", c.Result)
		if isToolError(c.Result) {
			attrs.PutStr("error.type", "tool_error")
			sp.Status().SetCode(ptrace.StatusCodeError)
			sp.Status().SetMessage("tool error")
		}
	}
}

// isToolError reports whether a tools/call result says isError.
func isToolError(result string) bool { return strings.Contains(result, `"isError":true`) }

// traceID and spanID are derived from the session and the call's place in
// the stream: stable for a seed, distinct between calls and between the
// two observations of one exchange.
func (c *Call) traceID() pcommon.TraceID {
	var id pcommon.TraceID
	h := fnv.New64a()
	h.Write([]byte(c.Session))
	binary.BigEndian.PutUint64(id[:8], h.Sum64())
	binary.BigEndian.PutUint64(id[8:], mix64(c.seq))
	return id
}

func (c *Call) spanID() pcommon.SpanID {
	var id pcommon.SpanID
	h := fnv.New64a()
	h.Write([]byte(c.Session))
	binary.BigEndian.PutUint64(id[:], mix64(h.Sum64()^c.seq<<1^uint64(c.Kind)))
	return id
}

// mix64 is SplitMix64's finalizer.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
