package receiver_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// badNumbers are number tokens fastjson takes or trips on that are not
// JSON numbers (RFC 8259 §6); Python's json.dumps writes the first two.
var badNumbers = []string{"NaN", "-Infinity", "nan", "+1", "01", "1.", ".5", "1.2.3", "1e", "0x10"}

// goodNumbers are JSON numbers, taken and stored as written.
const goodNumbers = `[-0,1e-7,1E+2,0.5,123456789012345678901234567890]`

// TestCalls_NumbersNotJSON: over /v1/calls, a line whose arguments hold a
// number that is not JSON is rejected alone as not JSON, naming the number
// and its byte offset in the line (the redactor masked the whole arguments
// of a NaN, and nan and 1.2.3 were stored as they were); the lines beside
// it are stored, their valid numbers as written.
func TestCalls_NumbersNotJSON(t *testing.T) {
	e := newEnv(t, nil)
	stored := 0
	for i, tok := range badNumbers {
		t.Run(tok, func(t *testing.T) {
			line := func(j int, n string) string {
				return strings.Replace(record("thegram", "gram_read", now, 100*i+j), `"a.gram"`, `"a.gram","n":`+n, 1)
			}
			bad := line(2, tok)
			a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(line(1, goodNumbers)+"\n"+bad+"\n"+line(3, "7")+"\n"))
			var got struct {
				Accepted int      `json:"accepted"`
				Rejected int      `json:"rejected"`
				Errors   []string `json:"errors"`
			}
			if err := json.Unmarshal([]byte(a.body), &got); err != nil || a.status != 200 {
				t.Fatalf("%d %.500s: %v", a.status, a.body, err)
			}
			want := fmt.Sprintf("body:2: not JSON: %s is not a JSON number at byte offset %d", tok, strings.Index(bad, `"n":`)+4)
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
					if w := `{"path":"a.gram","n":` + goodNumbers + `}`; string(c.Arguments) != w {
						t.Errorf("arguments stored as %s, want %s", c.Arguments, w)
					}
				}
			}
			if !found {
				t.Error("the call with valid numbers is not stored")
			}
		})
	}
}

// TestOTLP_NumbersNotJSON: over OTLP/HTTP, protobuf and JSON, a span
// whose gen_ai.tool.call.arguments or result holds a number that is not
// JSON is rejected alone (partial success), naming the attribute, the
// number and its byte offset in the attribute; the spans beside it are
// stored, valid numbers as written.
func TestOTLP_NumbersNotJSON(t *testing.T) {
	e := newEnv(t, nil)
	stored, seq := 0, 0
	for _, asJSON := range []bool{false, true} {
		carrier := map[bool]string{false: "protobuf", true: "json"}[asJSON]
		for _, attr := range []string{"arguments", "result"} {
			for _, tok := range append([]string{""}, badNumbers...) {
				t.Run(carrier+"/"+attr+"/"+tok, func(t *testing.T) {
					payload := `{"n":` + goodNumbers + `}`
					if tok != "" {
						payload = `{"n":` + tok + `}`
					}
					req := traces("thegram", 3, func(sp ptrace.Span) { sp.Attributes().PutStr("gen_ai.tool.call."+attr, payload) })
					// Each request's calls distinct from the last's.
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
					want := fmt.Sprintf("gen_ai.tool.call.%s is not JSON: %s is not a JSON number at byte offset 5", attr, tok)
					kept := 2
					if tok == "" {
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
					if tok == "" {
						n := 0
						for _, c := range calls {
							if c.Session == fmt.Sprintf("s-%d-0", seq) {
								n++
								got := c.Arguments
								if attr == "result" {
									got = c.Result
								}
								if string(got) != payload {
									t.Errorf("%s stored as %s, want %s", attr, got, payload)
								}
							}
						}
						if n != 1 {
							t.Errorf("%d calls of the span with valid numbers stored, want 1", n)
						}
					}
				})
			}
		}
	}
}
