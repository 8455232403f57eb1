package otlp

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// calls returns the calls of the records of res.
func calls(res Result) []*audit.Call {
	var cs []*audit.Call
	for _, r := range res.Records {
		cs = append(cs, r.Call)
	}
	return cs
}

var start = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

func span(ss ptrace.ScopeSpans, kind ptrace.SpanKind, attrs map[string]any) ptrace.Span {
	sp := ss.Spans().AppendEmpty()
	sp.SetKind(kind)
	sp.SetTraceID(pcommon.TraceID{1, 2, 3})
	sp.SetSpanID(pcommon.SpanID{byte(ss.Spans().Len())})
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Duration(ss.Spans().Len()) * time.Second)))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Duration(ss.Spans().Len())*time.Second + 250*time.Millisecond)))
	if err := sp.Attributes().FromRaw(attrs); err != nil {
		panic(err)
	}
	return sp
}

func TestConvert(t *testing.T) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "thegram-eu")
	ss := rs.ScopeSpans().AppendEmpty()
	// semconv names
	span(ss, ptrace.SpanKindServer, map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": "gram_patch",
		"mcp.session.id": "s1", "jsonrpc.request.id": "7", "gen_ai.tool.call.arguments": `{"path":"a"}`,
		"gen_ai.tool.call.result": `{"isError":false}`})
	// aliases seen in the wild
	span(ss, ptrace.SpanKindServer, map[string]any{"mcp.tool.name": "gram_read", "mcp.session_id": "s2", "mcp.request.id": 8})
	// a JSON-RPC error
	er := span(ss, ptrace.SpanKindServer, map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": "gram_read", "error.type": "-32603"})
	er.Status().SetCode(ptrace.StatusCodeError)
	er.Status().SetMessage("Thegram answered HTTP 502 with no body")
	// a transport error
	span(ss, ptrace.SpanKindServer, map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": "gram_patch", "error.type": "timeout"})
	// a server code in error.type
	span(ss, ptrace.SpanKindServer, map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": "gram_read", "error.type": "E_APP_NOT_RUNNING"})
	// a tool error without the opt-in result
	span(ss, ptrace.SpanKindServer, map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": "gram_patch", "error.type": "tool_error"})
	// not a tools/call
	span(ss, ptrace.SpanKindServer, map[string]any{"mcp.method.name": "tools/list"})
	// unusable tools/call spans
	span(ss, ptrace.SpanKindServer, map[string]any{"mcp.method.name": "tools/call"})
	span(ss, ptrace.SpanKindServer, map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": "x", "gen_ai.tool.call.arguments": "{nope"})
	// a client span names its server in server.address
	cs := td.ResourceSpans().AppendEmpty()
	cs.Resource().Attributes().PutStr("service.name", "agent-7")
	span(cs.ScopeSpans().AppendEmpty(), ptrace.SpanKindClient, map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": "run", "server.address": "oddlynew"})

	res := Read(td, "f:", dialect.NewReader(dialect.Config{}))
	if res.Ignored != 1 || len(res.Rejected) != 2 || len(res.Records) != 7 {
		t.Fatalf("ignored %d rejected %v calls %d", res.Ignored, res.Rejected, len(res.Records))
	}
	if !strings.HasPrefix(res.Rejected[0].Error(), "resourceSpans[0].scopeSpans[0].spans[7]: ") {
		t.Errorf("rejected path: %v", res.Rejected[0])
	}
	c := calls(res)
	if c[0].Server != "thegram-eu" || c[0].Session != "s1" || c[0].RPCID != "7" || string(c[0].Arguments) != `{"path":"a"}` || !c[0].Responded || c[0].Duration != 250*time.Millisecond {
		t.Errorf("semconv span: %+v", c[0])
	}
	if c[1].Tool != "gram_read" || c[1].Session != "s2" || c[1].RPCID != "8" || !c[1].Responded || c[1].Result != nil {
		t.Errorf("alias span: %+v", c[1])
	}
	if c[2].Error == nil || c[2].Error.Code != -32603 || c[2].Error.Message == "" {
		t.Errorf("rpc error span: %+v", c[2])
	}
	if c[3].TransportError != "timeout" || c[3].Responded {
		t.Errorf("timeout span: %+v", c[3])
	}
	// The desktop helper's code is read as the error's data code, though
	// the span records no data.
	if f := res.Records[4].Failure; c[4].Error == nil || c[4].Error.Code != -32000 || c[4].Error.Data != nil || f == nil || f.Code != "E_APP_NOT_RUNNING" {
		t.Errorf("server code span: %+v %+v", c[4], f)
	}
	// A tool error without its result is read as one; no result is made up.
	if r := res.Records[5]; !c[5].Responded || c[5].Result != nil || r.Outcome != audit.OutcomeToolError {
		t.Errorf("tool error span: %+v %+v", c[5], r)
	}
	if c[6].Server != "oddlynew" || c[6].Client != "agent-7" {
		t.Errorf("client span: %+v", c[6])
	}
	for _, x := range c {
		if x.ID == "" || x.TraceID == "" || x.SpanID == "" {
			t.Errorf("ids missing: %+v", x)
		}
	}
}

// TestConvert_ArgumentsWithoutResult: a span that records the opt-in
// arguments but no result and no error saw no response, as a call record
// with neither response nor transport_error.
func TestConvert_ArgumentsWithoutResult(t *testing.T) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "thegram")
	span(rs.ScopeSpans().AppendEmpty(), ptrace.SpanKindServer, map[string]any{"mcp.method.name": "tools/call",
		"gen_ai.tool.name": "gram_patch", "gen_ai.tool.call.arguments": `{"path":"a"}`})
	res := Read(td, "f:", nil)
	if len(res.Records) != 1 || res.Records[0].Call.Responded || res.Records[0].Call.TransportError != "" {
		t.Fatalf("calls %+v", calls(res))
	}
}

// TestConvert_ServerCodeInErrorType: a span recording a server code in
// error.type, without the result, is a tool error with that code, and an
// explicit Ok status with arguments is an answered call.
func TestConvert_ServerCodeInErrorType(t *testing.T) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "thegram")
	ss := rs.ScopeSpans().AppendEmpty()
	sp := span(ss, ptrace.SpanKindServer, map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": "gram_patch",
		"gen_ai.tool.call.arguments": `{"path":"a"}`, "error.type": "COMMIT_UNKNOWN"})
	sp.Status().SetCode(ptrace.StatusCodeError)
	sp.Status().SetMessage("Replacement published but durability is uncertain: x")
	ok := span(ss, ptrace.SpanKindServer, map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": "gram_read",
		"gen_ai.tool.call.arguments": `{"path":"a"}`})
	ok.Status().SetCode(ptrace.StatusCodeOk)
	res := Read(td, "f:", dialect.NewReader(dialect.Config{}))
	if len(res.Records) != 2 {
		t.Fatalf("calls %+v", calls(res))
	}
	// Read as the result {"isError":true,"structuredContent":{"error":{"code":
	// "COMMIT_UNKNOWN","message":...}}} would be, without making it up.
	r := res.Records[0]
	if c := r.Call; !c.Responded || c.Result != nil || r.Outcome != audit.OutcomeToolError || r.Failure == nil ||
		r.Failure.Code != "COMMIT_UNKNOWN" || r.Failure.Message != "Replacement published but durability is uncertain: x" ||
		len(r.Ops) != 1 || r.Ops[0].Status != audit.OpUncertain {
		t.Errorf("server code span: %+v %+v", c, r)
	}
	if c := res.Records[1].Call; !c.Responded {
		t.Errorf("ok span with arguments: %+v", c)
	}
}
