package receiver_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// badStrings are string texts (between the quotes) fastjson takes that
// are not JSON strings (RFC 8259 §7), with the reason named; the fault is
// at the text's first byte.
var badStrings = []struct{ text, reason string }{
	{"\x01a", "a control byte 0x01 inside a string"},
	{"\x00", "a control byte 0x00 inside a string"},
	{"\ta", "a control byte 0x09 inside a string"},
	{`\0`, `invalid escape \0`},
	{`\x41`, `invalid escape \x`},
	{`\u12`, `invalid escape \u12 (\u takes 4 hex digits)`},
	{`\ a`, `invalid escape: a backslash before byte 0x20`},
}

// goodStrings holds every JSON escape, stored byte for byte.
const goodStrings = `"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00 é"`

// TestCalls_StringsNotJSON: over /v1/calls, a line whose arguments hold a
// string that is not JSON is rejected alone as not JSON, with the reason
// and its byte offset in the line (it was stored as sent); the lines
// beside it are stored, their escapes as written.
func TestCalls_StringsNotJSON(t *testing.T) {
	e := newEnv(t, nil)
	stored := 0
	for i, bs := range badStrings {
		t.Run(fmt.Sprintf("%q", bs.text), func(t *testing.T) {
			line := func(j int, n string) string {
				return strings.Replace(record("thegram", "gram_read", now, 100*i+j), `"a.gram"`, `"a.gram","n":`+n, 1)
			}
			bad := line(2, `"`+bs.text+`"`)
			a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(line(1, goodStrings)+"\n"+bad+"\n"+line(3, "7")+"\n"))
			var got struct {
				Accepted int      `json:"accepted"`
				Rejected int      `json:"rejected"`
				Errors   []string `json:"errors"`
			}
			if err := json.Unmarshal([]byte(a.body), &got); err != nil || a.status != 200 {
				t.Fatalf("%d %.500s: %v", a.status, a.body, err)
			}
			want := fmt.Sprintf("body:2: not JSON: %s at byte offset %d", bs.reason, strings.Index(bad, `"n":`)+5)
			if got.Accepted != 2 || got.Rejected != 1 || len(got.Errors) != 1 || !strings.HasPrefix(got.Errors[0], want) {
				t.Fatalf("accepted %d, rejected %d, errors %q; want 2, 1 and one starting %q", got.Accepted, got.Rejected, got.Errors, want)
			}
			calls := e.stored(t)
			if stored += 2; len(calls) != stored {
				t.Fatalf("%d calls stored, want %d", len(calls), stored)
			}
			found := false
			for _, c := range calls {
				if c.RPCID == fmt.Sprint(100*i+1) {
					found = true
					if w := `{"path":"a.gram","n":` + goodStrings + `}`; string(c.Arguments) != w {
						t.Errorf("arguments stored as %s, want %s", c.Arguments, w)
					}
				}
			}
			if !found {
				t.Error("the call with valid escapes is not stored")
			}
		})
	}
}

// TestOTLP_StringsNotJSON: over OTLP/HTTP, protobuf and JSON, a span
// whose gen_ai.tool.call.arguments or result holds a string that is not
// JSON is rejected alone (partial success), naming the attribute, the
// reason and its byte offset in the attribute; the spans beside it are
// stored, valid escapes as written.
func TestOTLP_StringsNotJSON(t *testing.T) {
	e := newEnv(t, nil)
	stored, seq := 0, 0
	for _, asJSON := range []bool{false, true} {
		carrier := map[bool]string{false: "protobuf", true: "json"}[asJSON]
		for _, attr := range []string{"arguments", "result"} {
			for _, bs := range append([]struct{ text, reason string }{{}}, badStrings...) {
				t.Run(fmt.Sprintf("%s/%s/%q", carrier, attr, bs.text), func(t *testing.T) {
					payload := `{"n":` + goodStrings + `}`
					if bs.reason != "" {
						payload = `{"n":"` + bs.text + `"}`
					}
					req := traces("thegram", 3, func(sp ptrace.Span) { sp.Attributes().PutStr("gen_ai.tool.call."+attr, payload) })
					seq++
					rs := req.Traces().ResourceSpans().At(0).ScopeSpans().At(0).Spans()
					for k := range rs.Len() {
						rs.At(k).Attributes().PutStr("mcp.session.id", fmt.Sprintf("s-%d-%d", seq, k))
					}
					var b []byte
					ct := "application/x-protobuf"
					if asJSON {
						b, _ = req.MarshalJSON()
						ct = "application/json"
					} else {
						b, _ = req.MarshalProto()
					}
					a := e.post(t, "/v1/traces", ct, tokAcme, b)
					resp := ptraceotlp.NewExportResponse()
					if asJSON {
						resp.UnmarshalJSON([]byte(a.body))
					} else {
						resp.UnmarshalProto([]byte(a.body))
					}
					ps := resp.PartialSuccess()
					want := fmt.Sprintf("gen_ai.tool.call.%s is not JSON: %s at byte offset 6", attr, bs.reason)
					kept := 2
					if bs.reason == "" {
						kept = 3
						if a.status != 200 || ps.RejectedSpans() != 0 {
							t.Fatalf("%d %q, want 200 with nothing rejected", a.status, ps.ErrorMessage())
						}
					} else if a.status != 200 || ps.RejectedSpans() != 1 || !strings.Contains(ps.ErrorMessage(), want) ||
						!strings.Contains(ps.ErrorMessage(), "resourceSpans[0].scopeSpans[0].spans[0]") {
						t.Fatalf("%d, partial success %d %q; want 200 with span 0 rejected naming %q", a.status, ps.RejectedSpans(), ps.ErrorMessage(), want)
					}
					calls := e.stored(t)
					if stored += kept; len(calls) != stored {
						t.Fatalf("%d calls stored, want %d", len(calls), stored)
					}
					if bs.reason == "" {
						n := 0
						for _, c := range calls {
							if c.Session == fmt.Sprintf("s-%d-0", seq) {
								n++
								got := c.Result
								if attr == "arguments" {
									got = c.Arguments
								}
								if string(got) != payload {
									t.Errorf("%s stored as %s, want %s", attr, got, payload)
								}
							}
						}
						if n != 1 {
							t.Errorf("%d calls of the span with valid escapes stored, want 1", n)
						}
					}
				})
			}
		}
	}
}
