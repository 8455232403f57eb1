package receiver_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
)

// notJSON is a value fastjson takes (or trips on) that is not JSON: text
// as it stands after a key, the reason the rejection names, and the
// fault's offset within text.
type notJSON struct {
	text, reason string
	at           int
}

// badNumbers are number tokens that are not JSON numbers (RFC 8259 §6);
// Python's json.dumps writes the first two.
var badNumbers = func() []notJSON {
	var v []notJSON
	for _, tok := range []string{"NaN", "-Infinity", "nan", "+1", "01", "1.", ".5", "1.2.3", "1e", "0x10"} {
		v = append(v, notJSON{tok, tok + " is not a JSON number", 0})
	}
	return v
}()

// goodNumbers are JSON numbers, taken and stored as written.
const goodNumbers = `[-0,1e-7,1E+2,0.5,123456789012345678901234567890]`

// badStrings are strings that are not JSON strings (RFC 8259 §7); the
// fault is at the text's first byte after the quote.
var badStrings = func() []notJSON {
	var v []notJSON
	for _, s := range []struct{ text, reason string }{
		{"\x01a", "a control byte 0x01 inside a string"},
		{"\x00", "a control byte 0x00 inside a string"},
		{"\ta", "a control byte 0x09 inside a string"},
		{`\0`, `invalid escape \0`},
		{`\x41`, `invalid escape \x`},
		{`\u12`, `invalid escape \u12 (\u takes 4 hex digits)`},
		{`\ a`, `invalid escape: a backslash before byte 0x20`},
	} {
		v = append(v, notJSON{`"` + s.text + `"`, s.reason, 1})
	}
	return v
}()

// goodStrings holds every JSON escape, stored byte for byte.
const goodStrings = `"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00 é"`

// TestCalls_NumbersNotJSON: over /v1/calls, a line whose arguments hold a
// number that is not JSON is rejected alone as not JSON, naming the number
// and its byte offset in the line (the redactor masked the whole arguments
// of a NaN, and nan and 1.2.3 were stored as they were); the lines beside
// it are stored, their valid numbers as written.
func TestCalls_NumbersNotJSON(t *testing.T) { callsNotJSON(t, badNumbers, goodNumbers) }

// TestCalls_StringsNotJSON: the same for a string that is not JSON (it was
// stored as sent); valid escapes are stored as written.
func TestCalls_StringsNotJSON(t *testing.T) { callsNotJSON(t, badStrings, goodStrings) }

// TestOTLP_NumbersNotJSON: over OTLP/HTTP, protobuf and JSON, a span
// whose gen_ai.tool.call.arguments or result holds a number that is not
// JSON is rejected alone (partial success), naming the attribute, the
// number and its byte offset in the attribute; the spans beside it are
// stored, valid numbers as written.
func TestOTLP_NumbersNotJSON(t *testing.T) { otlpNotJSON(t, badNumbers, goodNumbers) }

// TestOTLP_StringsNotJSON: the same for a string that is not JSON.
func TestOTLP_StringsNotJSON(t *testing.T) { otlpNotJSON(t, badStrings, goodStrings) }

// callsNotJSON posts, for each of bad, a line holding it between a line
// holding good and a plain one, and checks the answer and what is stored.
func callsNotJSON(t *testing.T, bad []notJSON, good string) {
	e := newEnv(t, nil)
	stored := 0
	for i, v := range bad {
		t.Run(fmt.Sprintf("%q", v.text), func(t *testing.T) {
			line := func(j int, n string) string {
				return strings.Replace(record("thegram", "gram_read", now, 100*i+j), `"a.gram"`, `"a.gram","n":`+n, 1)
			}
			badLine := line(2, v.text)
			a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(line(1, good)+"\n"+badLine+"\n"+line(3, "7")+"\n"))
			var got struct {
				Accepted int      `json:"accepted"`
				Rejected int      `json:"rejected"`
				Errors   []string `json:"errors"`
			}
			if err := json.Unmarshal([]byte(a.body), &got); err != nil || a.status != 200 {
				t.Fatalf("%d %.500s: %v", a.status, a.body, err)
			}
			want := fmt.Sprintf("body:2: not JSON: %s at byte offset %d", v.reason, strings.Index(badLine, `"n":`)+4+v.at)
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
					if w := `{"path":"a.gram","n":` + good + `}`; string(c.Arguments) != w {
						t.Errorf("arguments stored as %s, want %s", c.Arguments, w)
					}
				}
			}
			if !found {
				t.Error("the call with valid values is not stored")
			}
		})
	}
}

// otlpNotJSON sends, for each carrier, payload attribute and each of bad
// (and good first), a request of three spans whose first holds it in the
// attribute, and checks the partial success and what is stored.
func otlpNotJSON(t *testing.T, bad []notJSON, good string) {
	e := newEnv(t, nil)
	stored, seq := 0, 0
	for _, asJSON := range []bool{false, true} {
		carrier := map[bool]string{false: "protobuf", true: "json"}[asJSON]
		for _, attr := range []string{"arguments", "result"} {
			for _, v := range append([]notJSON{{}}, bad...) {
				t.Run(fmt.Sprintf("%s/%s/%q", carrier, attr, v.text), func(t *testing.T) {
					payload := `{"n":` + good + `}`
					if v.reason != "" {
						payload = `{"n":` + v.text + `}`
					}
					req := traces("thegram", 3, func(sp ptrace.Span) { sp.Attributes().PutStr("gen_ai.tool.call."+attr, payload) })
					// Each request's calls distinct from the last's.
					seq++
					rs := req.Traces().ResourceSpans().At(0).ScopeSpans().At(0).Spans()
					for k := range rs.Len() {
						rs.At(k).Attributes().PutStr("mcp.session.id", fmt.Sprintf("s-%d-%d", seq, k))
					}
					a, resp := e.postTraces(t, req, asJSON)
					ps := resp.PartialSuccess()
					want := fmt.Sprintf("gen_ai.tool.call.%s is not JSON: %s at byte offset %d", attr, v.reason, 5+v.at)
					kept := 2
					if v.reason == "" {
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
					if v.reason != "" {
						return
					}
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
						t.Errorf("%d calls of the span with valid values stored, want 1", n)
					}
				})
			}
		}
	}
}
