package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// recordWith is a call record whose request and response are given.
func recordWith(request, response string) string {
	r := `{"time":"2026-11-02T09:00:00Z","server":"thegram","session":"s","request":` + request
	if response != "" {
		r += `,"response":` + response
	}
	return r + "}"
}

// TestParse_WrongTypes: a member JSON-RPC 2.0 or MCP gives a type, of
// another type, rejects its record naming the field and why, as a
// top-level field of the wrong type does; before (adv48), a method that is
// not a string was taken as tools/call, an object or array id kept as its
// text, an isError that is not a boolean read as false, and an id of
// 1e999999 taken.
func TestParse_WrongTypes(t *testing.T) {
	f := func(request, response, wantField, wantReason string) {
		t.Helper()
		var rp RecordParser
		rec := recordWith(request, response)
		_, err := rp.Parse([]byte(rec), "in", 3)
		var re *RecordError
		if !errors.As(err, &re) {
			t.Fatalf("%s: taken, want field %s rejected (%v)", rec, wantField, err)
		}
		if re.Line != 3 || re.Field != wantField || !strings.Contains(re.Reason, wantReason) || re.Kind != "" {
			t.Errorf("%s:\n got %s (kind %q)\nwant in:3: field %s: ...%s...", rec, re, re.Kind, wantField, wantReason)
		}
	}
	const params = `"params":{"name":"gram_read","arguments":{"path":"a"}}`
	f(`{"jsonrpc":"2.0","id":1,"method":5,`+params+`}`, ``, "request.method", "must be a string (the JSON-RPC method), not number")
	f(`{"jsonrpc":"2.0","id":1,"method":["tools/call"],`+params+`}`, ``, "request.method", "not array")
	f(`{"jsonrpc":"2.0","id":1,"method":true,`+params+`}`, ``, "request.method", "not true")
	f(`{"jsonrpc":"2.0","id":{"n":1},"method":"tools/call",`+params+`}`, ``, "request.id", "must be a string, a number or null (JSON-RPC 2.0), not object")
	f(`{"jsonrpc":"2.0","id":[1],"method":"tools/call",`+params+`}`, ``, "request.id", "not array")
	f(`{"jsonrpc":"2.0","id":false,"method":"tools/call",`+params+`}`, ``, "request.id", "not false")
	f(`{"jsonrpc":"2.0","id":1e999999,"method":"tools/call",`+params+`}`, ``, "request.id", "1e999999 is past the range of a number")
	f(`{"jsonrpc":"2.0","id":-1E400,"method":"tools/call",`+params+`}`, ``, "request.id", "-1E400 is past the range")
	f(`{"id":1,"method":"tools/call","params":{"name":"gram_read","arguments":"path=a"}}`, ``, "request.params.arguments", "must be an object (the tool's named arguments), not string")
	f(`{"id":1,"method":"tools/call","params":{"name":"gram_read","arguments":[1]}}`, ``, "request.params.arguments", "not array")
	f(`{"id":1,"method":"tools/call",`+params+`}`, `{"id":1,"result":{"isError":"true"}}`, "response.result", "isError must be a boolean, not string")
	f(`{"id":1,"method":"tools/call",`+params+`}`, `{"id":1,"result":{"content":[],"isError":1}}`, "response.result", "isError must be a boolean, not number")
	f(`{"id":1,"method":"tools/call",`+params+`}`, `{"id":1,"result":[{"isError":true}]}`, "response.result", "must be an object (content, structuredContent, isError), not array")
	f(`{"id":1,"method":"tools/call",`+params+`}`, `{"id":1,"result":"done"}`, "response.result", "not string")
	f(`{"id":1,"method":"tools/call",`+params+`}`, `{"id":1,"error":{"code":-32603,"message":{"text":"boom"}}}`, "response.error.message", "must be a string, not object")

	// What JSON-RPC and MCP allow is taken as before.
	ok := func(request, response, wantRPC, wantMethod string, wantErr bool) {
		t.Helper()
		var rp RecordParser
		rec := recordWith(request, response)
		r, err := rp.Read([]byte(rec), "in", 1, dialect.NewReader(dialect.Config{}), true)
		if err != nil {
			t.Fatalf("%s: %v", rec, err)
		}
		c := r.Call
		if c.RPCID != wantRPC || c.Method != wantMethod {
			t.Errorf("%s: id %q method %q, want %q %q", rec, c.RPCID, c.Method, wantRPC, wantMethod)
		}
		if got := r.Outcome == audit.OutcomeToolError; got != wantErr {
			t.Errorf("%s: tool error %v, want %v", rec, got, wantErr)
		}
	}
	ok(`{"id":null,"method":null,`+params+`}`, `{"result":{"isError":null}}`, "", "tools/call", false)
	ok(`{"id":"a-1",`+params+`}`, `{"result":{}}`, "a-1", "tools/call", false)
	ok(`{"id":1.5,"method":"tools/call",`+params+`}`, `{"result":{"isError":true}}`, "1.5", "tools/call", true)
	ok(`{"id":12345678901234567890123,"method":"tools/call",`+params+`}`, `{"result":{"isError":false}}`, "12345678901234567890123", "tools/call", false)
	ok(`{"id":1e308,"method":"tools/call",`+params+`}`, `{"error":{"code":-32603,"message":null}}`, "1e308", "tools/call", false)
	ok(`{"id":7,"method":"tools/list","params":{}}`, `{"result":{"tools":[]}}`, "7", "tools/list", false)
}

// TestParse_NamedTwice: a record in which one object names a member twice
// is rejected whole, naming the member's path and the byte offsets of both
// names, however the names are spelt; before (adv48), the record's fields
// took the first copy and the intent's canonical JSON the last.
func TestParse_NamedTwice(t *testing.T) {
	f := func(rec, wantField string, first, second int) {
		t.Helper()
		var rp RecordParser
		_, err := rp.Parse([]byte(rec), "in", 2)
		var re *RecordError
		if !errors.As(err, &re) {
			t.Fatalf("%s: taken (%v), want %s rejected", rec, err, wantField)
		}
		want := "given twice in one object (at byte offsets " + strconv.Itoa(first) + " and " + strconv.Itoa(second) + ")"
		if re.Field != wantField || !strings.HasPrefix(re.Reason, want) || re.Line != 2 {
			t.Errorf("%s:\n got %s\nwant field %s: %s", rec, re, wantField, want)
		}
		if rec[first] != '"' || rec[second] != '"' {
			t.Errorf("%s: offsets %d, %d are not the names' quotes", rec, first, second)
		}
	}
	const head = `{"time":"2026-11-02T09:00:00Z",`
	twice := func(rec, name string) {
		t.Helper()
		q := `"` + name + `"`
		first := strings.Index(rec, q)
		f(rec, name, first, first+len(q)+strings.Index(rec[first+len(q):], q))
	}
	twice(head+`"server":"thegram","server":"other","request":{"method":"tools/call","params":{"name":"gram_read"}}}`, "server")
	twice(`{"time":"2026-11-02T09:00:00Z","server":"thegram","time":"2026-11-02T10:00:00Z","request":{"method":"tools/call","params":{"name":"gram_read"}}}`, "time")
	idTwice := head + `"server":"thegram","request":{"id":1,"id":2,"method":"tools/call","params":{"name":"gram_read"}}}`
	f(idTwice, "request.id", strings.Index(idTwice, `"id"`), strings.LastIndex(idTwice, `"id"`))
	// The intent of a gram_patch: its path, given twice.
	patch := head + `"server":"thegram","request":{"method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"a.gram","operations":[],"path":"b.gram","request_id":"r"}}}}`
	f(patch, "request.params.arguments.path", strings.Index(patch, `"path"`), strings.LastIndex(patch, `"path"`))
	esc := head + `"server":"thegram","request":{"method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"a.gram","p\u0061th":"b.gram"}}}}`
	f(esc, "request.params.arguments.path", strings.Index(esc, `"path"`), strings.Index(esc, `"p\u0061th"`))
	deep := head + `"server":"thegram","request":{"method":"tools/call","params":{"name":"gram_patch","arguments":{"operations":[{"op":"insert"},{"op":"set","at":1,"op":"delete"}]}}}}`
	f(deep, "request.params.arguments.operations[1].op", strings.LastIndex(deep, `"op":"set"`), strings.LastIndex(deep, `"op"`))
	res := head + `"server":"thegram","request":{"method":"tools/call","params":{"name":"gram_read"}},"response":{"result":{"isError":false,"isError":true}}}`
	f(res, "response.result.isError", strings.Index(res, `"isError"`), strings.LastIndex(res, `"isError"`))
	// Anywhere in the record, an unknown member's value included: the
	// record is the evidence, and is not half taken.
	unk := head + `"server":"thegram","x-extra":{"a":1,"a":2},"request":{"method":"tools/call","params":{"name":"gram_read"}}}`
	f(unk, `x-extra.a`, strings.Index(unk, `"a"`), strings.LastIndex(unk, `"a"`))
	// An object of many members (sorted, not compared pair by pair).
	var big strings.Builder
	big.WriteString(head + `"server":"thegram","request":{"method":"tools/call","params":{"name":"gram_read","arguments":{`)
	for i := range 40 {
		big.WriteString(`"k` + strconv.Itoa(i) + `":1,`)
	}
	at := big.Len()
	big.WriteString(`"k7":2}}}}`)
	f(big.String(), "request.params.arguments.k7", strings.Index(big.String(), `"k7"`), at)

	// The same names in different objects, and an object of many distinct
	// members, are taken.
	var rp RecordParser
	okRec := head + `"server":"thegram","request":{"id":1,"method":"tools/call","params":{"name":"gram_read","arguments":{"id":1,"params":{"name":"x"}}}},"response":{"id":1,"result":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}}`
	if _, err := rp.Parse([]byte(okRec), "in", 1); err != nil {
		t.Fatal(err)
	}
	many := strings.Replace(big.String(), `"k7":2}`, `"k40":2}`, 1)
	if _, err := rp.Parse([]byte(many), "in", 1); err != nil {
		t.Fatal(err)
	}
}

// TestDecoder_NamedTwiceKeepsGoodLines: the rejected lines are named and
// the lines beside them taken, in a file as in a body.
func TestDecoder_NamedTwiceKeepsGoodLines(t *testing.T) {
	in := strings.Join([]string{
		good,
		`{"time":"2026-11-02T09:00:00Z","server":"thegram","server":"x","request":{"method":"tools/call","params":{"name":"gram_read"}}}`,
		recordWith(`{"id":{},"method":"tools/call","params":{"name":"gram_read"}}`, ``),
		recordWith(`{"id":1,"method":"tools/call","params":{"name":"gram_read"}}`, `{"result":{"isError":"yes"}}`),
		good,
	}, "\n")
	n, rejects, _ := decodeAll(t, []byte(in))
	if n != 2 || len(rejects) != 3 {
		t.Fatalf("%d calls, rejects %v; want 2 calls and 3 rejects", n, rejects)
	}
	for i, w := range []string{"in:2: field server: given twice", "in:3: field request.id: must be", "in:4: field response.result: isError must be a boolean"} {
		if !strings.HasPrefix(rejects[i].Error(), w) {
			t.Errorf("reject %d = %q, want prefix %q", i, rejects[i], w)
		}
	}
}

// spanWith is a tools/call span of the minimal document whose attributes
// are attrs (OTLP JSON KeyValues, joined).
func spanWith(start int, attrs ...string) string {
	return fmt.Sprintf(`{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"01020304050607%02x","kind":2,"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":[%s]}`,
		start%256, 1793610000000000000+int64(start)*1e9, 1793610000000000000+int64(start)*1e9+5e8, strings.Join(attrs, ","))
}

func strAttr(k, v string) string {
	q, _ := json.Marshal(v)
	return `{"key":"` + k + `","value":{"stringValue":` + string(q) + `}}`
}

// readAllWays reads one OTLP JSON document as serve reads it over
// OTLP/HTTP JSON (pdata), as it reads the same request in protobuf
// (ReadProto, as OTLP/gRPC is read), and as analyze reads a file, and
// fails unless the three agree; it returns pdata's reading.
func readAllWays(t *testing.T, doc string) (recs []*audit.Record, rejected []string) {
	t.Helper()
	recs, rejected, _, err := viaPdata(t, []byte(doc), "in")
	if err != nil {
		t.Fatalf("pdata: %v", err)
	}
	got, gotRej, _ := viaStream(t, strings.NewReader(doc), "in", true)
	sameRecords(t, "analyze", recs, got)
	if !slices.Equal(rejected, gotRej) {
		t.Fatalf("analyze rejects %q, pdata %q", gotRej, rejected)
	}
	td, _ := otlp.DecodeJSON([]byte(doc))
	b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := otlp.CheckProto(b, 64)
	if !ok {
		t.Fatal("CheckProto refused the protobuf request")
	}
	res := otlp.NewConverter().ReadProto(m, "in:", dialect.NewReader(dialect.Config{}))
	slices.SortStableFunc(res.Records, func(a, b *audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	sameRecords(t, "protobuf", recs, res.Records)
	var protoRej []string
	for _, r := range res.Rejected {
		protoRej = append(protoRej, r.Error())
	}
	if !slices.Equal(rejected, protoRej) {
		t.Fatalf("protobuf rejects %q, pdata %q", protoRej, rejected)
	}
	return recs, rejected
}

// TestOTLP_PayloadTypesAndNamesTwice: a span's gen_ai.tool.call.arguments
// or result is held to what a call record's arguments and result are
// held to (an object; a boolean isError; no member named twice), in every
// encoding, the span rejected alone and named; before, arguments that are
// no object and an isError of another type were taken, and a member named
// twice read two ways.
func TestOTLP_PayloadTypesAndNamesTwice(t *testing.T) {
	tool := strAttr("gen_ai.tool.name", "gram_patch")
	args := func(s string) string { return strAttr("gen_ai.tool.call.arguments", s) }
	result := func(s string) string { return strAttr("gen_ai.tool.call.result", s) }
	doc := oneDoc("thegram",
		spanWith(1, tool, args(`{"path":"a.gram","operations":[]}`), result(`{"isError":false}`)),
		spanWith(2, tool, args(`"path=a.gram"`)),
		spanWith(3, tool, args(`{"path":"a.gram"}`), result(`{"isError":"false"}`)),
		spanWith(4, tool, args(`{"path":"a.gram"}`), result(`[]`)),
		spanWith(5, tool, args(`{"path":"a.gram","operations":[],"path":"b.gram"}`)),
		spanWith(6, tool, args(`{"path":"a.gram"}`), result(`{"structuredContent":{"rev":1,"r\u0065v":2}}`)),
		spanWith(7, tool, args(`{"path":"a.gram"}`), result(`{"isError":null}`)),
	)
	recs, rejected := readAllWays(t, doc)
	want := []string{
		`resourceSpans[0].scopeSpans[0].spans[1]: gen_ai.tool.call.arguments must be a JSON object (the tool's named arguments), not string`,
		`resourceSpans[0].scopeSpans[0].spans[2]: gen_ai.tool.call.result: isError must be a boolean, not string`,
		`resourceSpans[0].scopeSpans[0].spans[3]: gen_ai.tool.call.result: must be an object (content, structuredContent, isError), not array`,
		`resourceSpans[0].scopeSpans[0].spans[4]: gen_ai.tool.call.arguments names path twice (at byte offsets 1 and 33)`,
		`resourceSpans[0].scopeSpans[0].spans[5]: gen_ai.tool.call.result names structuredContent.rev twice (at byte offsets 22 and 30)`,
	}
	if len(recs) != 2 || len(rejected) != len(want) {
		t.Fatalf("%d calls, rejected %q; want 2 calls and %d rejected", len(recs), rejected, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(rejected[i], w) {
			t.Errorf("rejected %d:\n got %s\nwant %s...", i, rejected[i], w)
		}
	}
}

// TestOTLP_AttributeTwiceFirstCopy: an attribute key given twice in one
// attribute list (which OTLP forbids, and which some SDKs send: C++ before
// 1.9, Rust, .NET) is read from its first copy, as pcommon.Map.Get and the
// Collector's processors read it, and in every encoding alike; the span is
// taken, not refused.
func TestOTLP_AttributeTwiceFirstCopy(t *testing.T) {
	doc := `{"resourceSpans":[{"resource":{"attributes":[` + strAttr("service.name", "thegram") + `,` + strAttr("service.name", "oddlynew") + `]},"scopeSpans":[{"spans":[` +
		spanWith(1, strAttr("gen_ai.tool.name", "gram_patch"), strAttr("jsonrpc.request.id", "7"), strAttr("gen_ai.tool.name", "gram_read"),
			strAttr("gen_ai.tool.call.arguments", `{"path":"a.gram","operations":[]}`), strAttr("jsonrpc.request.id", "8"),
			strAttr("gen_ai.tool.call.arguments", `{"path":"b.gram","operations":[]}`), strAttr("mcp.session.id", ""), strAttr("mcp.session.id", "s2")) +
		`]}]}]}`
	recs, rejected := readAllWays(t, doc)
	if len(recs) != 1 || len(rejected) != 0 {
		t.Fatalf("%d calls, rejected %q", len(recs), rejected)
	}
	c := recs[0].Call
	if c.Server != "thegram" || c.Tool != "gram_patch" || c.RPCID != "7" || string(c.Arguments) != `{"path":"a.gram","operations":[]}` || c.Session != "" {
		t.Errorf("read %+v; want the first copy of each attribute", c)
	}
	if len(recs[0].Ops) != 1 || recs[0].Ops[0].Target != "a.gram" {
		t.Errorf("operations %+v, want a write of a.gram", recs[0].Ops)
	}
}
