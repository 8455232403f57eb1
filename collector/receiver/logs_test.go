package receiver_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
)

// TestLogs: rejected records and spans, refused requests and ignored
// items are logged as structured lines naming where and why, never the
// payload, and a flood of one kind is cut to the rate limit's burst.
func TestLogs(t *testing.T) {
	e := newEnv(t, nil)

	// One bad record beside a good one: a line names the record's place
	// and the reason; the secret in its arguments is not logged.
	bad := strings.Replace(record("bad\xffsrv", "gram_read", now, 1), `"a.gram"`, `"sk-live-0123456789abcdef"`, 1)
	a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(bad+"\n"+record("thegram", "gram_read", now, 2)+"\n"))
	if a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	got := e.logs.lines(t, "rejected_record")
	if len(got) != 1 {
		t.Fatalf("%d rejected_record lines, want 1: %v", len(got), got)
	}
	if m := got[0]; !strings.Contains(fmt.Sprint(m["error"]), "body:1: field server: invalid UTF-8") ||
		m["tenant"] != "acme" || m["transport"] != "calls_http" || m["level"] != "WARN" {
		t.Errorf("rejected_record line %v: want the record's place and reason, tenant acme, transport calls_http", m)
	}
	// It names the poster (its address, no Mcpaudit-Source header here), so
	// that an operator knows whom to ask among many.
	if m := got[0]; m["source"] != "calls:127.0.0.1" {
		t.Errorf("rejected_record line %v: want source calls:127.0.0.1, the poster", m)
	}

	// A record of another method is ignored, at debug level.
	other := strings.Replace(record("thegram", "gram_read", now, 3), `"tools/call"`, `"tools/list"`, 1)
	e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(other+"\n"+record("thegram", "gram_read", now, 4)+"\n"))
	if got := e.logs.lines(t, "ignored"); len(got) != 1 || got[0]["ignored"] != float64(1) || got[0]["level"] != "DEBUG" {
		t.Errorf("ignored lines %v, want one at debug counting 1", got)
	}

	// A refused request (wrong content type) is logged with its status.
	e.post(t, "/v1/calls", "text/plain", tokAcme, []byte("x"))
	if got := e.logs.lines(t, "rejected_request"); len(got) != 1 || !strings.HasPrefix(fmt.Sprint(got[0]["error"]), "415 ") {
		t.Errorf("rejected_request lines %v, want one naming 415", got)
	}

	// A bad span names its path.
	b, _ := traces("thegram", 2, func(sp ptrace.Span) { sp.Attributes().PutStr("gen_ai.tool.name", "gram\xff") }).MarshalProto()
	e.post(t, "/v1/traces", "application/x-protobuf", tokAcme, b)
	if got := e.logs.lines(t, "rejected_span"); len(got) != 1 || !strings.Contains(fmt.Sprint(got[0]["error"]), "resourceSpans[0].scopeSpans[0].spans[0]") {
		t.Errorf("rejected_span lines %v, want one naming its span", got)
	}

	// A record that is not JSON: the parser's error quotes the input where
	// it stopped, a secret here; the answer keeps it, the log does not.
	broken := strings.Replace(record("thegram", "gram_read", now, 7), `"a.gram"`, `sk-live-0123456789abcdef`, 1)
	a = e.post(t, "/v1/calls", "application/x-ndjson", tokGlobex, []byte(broken+"\n"+record("thegram", "gram_read", now, 8)+"\n"))
	if !strings.Contains(a.body, "unparsed tail") {
		t.Fatalf("%d %s: want the parser's error naming the unparsed tail", a.status, a.body)
	}
	if got := e.logs.lines(t, "rejected_record"); !slices.ContainsFunc(got, func(m map[string]any) bool {
		return m["tenant"] == "globex" && strings.Contains(fmt.Sprint(m["error"]), "body:1: not JSON")
	}) {
		t.Errorf("no rejected_record line for the broken record of globex: %v", got)
	}

	// A flood: 50 bad records in one request give the burst of lines (10
	// a minute), not 50.
	var flood []string
	for i := range 50 {
		flood = append(flood, record("bad\xff", "gram_read", now, 100+i))
	}
	flood = append(flood, record("thegram", "gram_read", now, 99))
	e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(strings.Join(flood, "\n")+"\n"))
	if got := e.logs.lines(t, "rejected_record"); len(got) != 10 {
		t.Errorf("%d rejected_record lines after a flood of 51, want the burst of 10", len(got))
	}
	e.logs.mu.Lock()
	all := e.logs.b.String()
	e.logs.mu.Unlock()
	if strings.Contains(all, "sk-live") {
		t.Errorf("the log holds a payload: %s", all)
	}
}

// TestLogs_OTLPJSONContextNotLogged: an OTLP JSON body the decoder cannot
// read is refused with its error, and the log line keeps the error but not
// the bytes of the body it cites around it, which are not all inside
// quotes: here a resource's count that holds a secret. A span the decoder
// cannot read is rejected alone, and its line does not quote it either:
// here the end of a trace id that holds a secret.
func TestLogs_OTLPJSONContextNotLogged(t *testing.T) {
	e := newEnv(t, nil)
	const secret = "hunter2-not-for-logs"
	body := `{"resourceSpans":[{"resource":{"droppedAttributesCount":"` + secret + `","attributes":[{"key":"service.name","value":{"stringValue":"thegram"}}]},` +
		`"scopeSpans":[{"spans":[{"traceId":"0a000000000000000000000000000000","spanId":"0900000000000000"}]}]}]}`
	if a := e.post(t, "/v1/traces", "application/json", tokAcme, []byte(body)); a.status != 400 {
		t.Fatalf("%d %s, want 400", a.status, a.body)
	}
	got := e.logs.lines(t, "rejected_request")
	if len(got) != 1 || !strings.Contains(fmt.Sprint(got[0]["error"]), "cannot decode OTLP JSON") {
		t.Fatalf("rejected_request lines %v, want one naming the decoder's error", got)
	}
	if s := fmt.Sprint(got[0]["error"]); strings.Contains(s, "for-logs") || strings.Contains(s, "hunter2") {
		t.Errorf("the log line quotes the body: %s", s)
	}
	span := `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"thegram"}}]},` +
		`"scopeSpans":[{"spans":[{"traceId":"` + secret + `","spanId":"0900000000000000","attributes":[{"key":"gen_ai.tool.name","value":{"stringValue":"gram_read"}}]}]}]}]}`
	if a := e.post(t, "/v1/traces", "application/json", tokAcme, []byte(span)); a.status != 200 || !strings.Contains(a.body, "spans[0]: traceId") {
		t.Fatalf("%d %s, want 200 with span 0 rejected for its trace id", a.status, a.body)
	}
	e.logs.mu.Lock()
	all := e.logs.b.String()
	e.logs.mu.Unlock()
	if strings.Contains(all, "for-logs") || strings.Contains(all, "hunter2") {
		t.Errorf("the log quotes the body: %s", all)
	}
}

// TestLogs_MalformedJSONNotQuoted: a record or an OTLP JSON body that is
// not JSON is logged with where it failed, never with the text around it:
// the decoders quote the input in their errors (fastjson its unparsed tail,
// the OTLP JSON decoder its context), and that text is the payload, before
// any redaction.
func TestLogs_MalformedJSONNotQuoted(t *testing.T) {
	e := newEnv(t, nil)
	bad := strings.Replace(record("thegram", "gram_read", now, 1), `"a.gram"`, `"a.gram", "password": hunter2-SECRET, "ssn": "123-45-6789"`, 1)
	if a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(bad+"\n"+record("thegram", "gram_read", now, 2)+"\n")); a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	otlpJSON := `{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"tools/call","attributes":[{"key":"gen_ai.tool.call.arguments","value":{"stringValue": hunter2-SECRET }}]}]}]}]}`
	e.post(t, "/v1/traces", "application/json", tokAcme, []byte(otlpJSON))
	rec, req := e.logs.lines(t, "rejected_record"), e.logs.lines(t, "rejected_request")
	if len(rec) != 1 || !strings.HasPrefix(fmt.Sprint(rec[0]["error"]), "body:1: not JSON") {
		t.Errorf("rejected_record lines %v: want one naming body:1 as not JSON", rec)
	}
	if len(req) != 1 || !strings.HasPrefix(fmt.Sprint(req[0]["error"]), "400 ") {
		t.Errorf("rejected_request lines %v: want one naming 400", req)
	}
	e.logs.mu.Lock()
	all := e.logs.b.String()
	e.logs.mu.Unlock()
	if strings.Contains(all, "hunter2") || strings.Contains(all, "123-45") {
		t.Errorf("the log quotes the payload of a malformed record:\n%s", all)
	}
}
