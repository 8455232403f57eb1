package capture

import (
	"fmt"
	"strings"
	"testing"
)

// badStrings are string texts (between the quotes) fastjson takes that
// are not JSON strings (RFC 8259 §7), each with the reason named; the fault
// is at the text's first byte.
var badStrings = []struct{ text, reason string }{
	{"\x01a", "a control byte 0x01 inside a string"},
	{"\x00", "a control byte 0x00 inside a string"},
	{"\ta", "a control byte 0x09 inside a string"},
	{"\x1f", "a control byte 0x1F inside a string"},
	{`\0`, `invalid escape \0`},
	{`\x41`, `invalid escape \x`},
	{`\u12`, `invalid escape \u12 (\u takes 4 hex digits)`},
	{`\u12zz`, `invalid escape \u12zz (\u takes 4 hex digits)`},
	{`\'`, `invalid escape \'`},
	{`\ a`, `invalid escape: a backslash before byte 0x20`},
}

// goodStrings holds every JSON escape, kept byte for byte.
const goodStrings = `"\"\\\/\b\f\n\r\t\u00e9\u00E9\ud83d\ude00 é"`

// TestAnalyze_StringsNotJSON: in a file of call records (mcpaudit
// analyze), a line with a string or key that is not JSON is rejected alone,
// as not JSON, with the reason and its byte offset in the line; the lines
// beside it are read, their escapes kept as written.
func TestAnalyze_StringsNotJSON(t *testing.T) {
	for _, bs := range badStrings {
		for _, where := range []string{"value", "key"} {
			t.Run(fmt.Sprintf("%q/%s", bs.text, where), func(t *testing.T) {
				bad := badNumberLine(2, `"`+bs.text+`"`)
				at := strings.Index(bad, `"n":`) + 5
				if where == "key" {
					bad = strings.Replace(badNumberLine(2, "1"), `"path"`, `"`+bs.text+`":1,"path"`, 1)
					at = strings.Index(bad, `"n":1,`) + 7
				}
				in := badNumberLine(1, goodStrings) + "\n" + bad + "\n" + badNumberLine(3, "7") + "\n"
				for _, keep := range []bool{true, false} {
					recs, rejected, _ := viaStream(t, strings.NewReader(in), "f.ndjson", keep)
					want := fmt.Sprintf("f.ndjson:2: not JSON: %s at byte offset %d", bs.reason, at)
					if len(rejected) != 1 || rejected[0] != want {
						t.Fatalf("keep %v: rejected %q, want one: %q", keep, rejected, want)
					}
					if len(recs) != 2 || recs[0].Call.RPCID != "1" || recs[1].Call.RPCID != "3" {
						t.Fatalf("keep %v: %d calls read, want lines 1 and 3", keep, len(recs))
					}
					if keep {
						if got, want := string(recs[0].Call.Arguments), `{"n":`+goodStrings+`,"path":"a.gram"}`; got != want {
							t.Fatalf("arguments %s, want %s as written", got, want)
						}
					}
				}
			})
		}
	}
}

// TestAnalyze_OTLPStringsNotJSON: in an OTLP JSON file, a span whose
// gen_ai.tool.call.arguments or result, or whose own JSON, holds a string
// that is not JSON is rejected alone with the reason and its byte offset;
// the spans beside it are read.
func TestAnalyze_OTLPStringsNotJSON(t *testing.T) {
	for _, bs := range badStrings {
		for _, where := range []string{"arguments", "result", "span"} {
			t.Run(fmt.Sprintf("%q/%s", bs.text, where), func(t *testing.T) {
				span := oneSpan(2, "gram_read")
				var want string
				switch where {
				case "span":
					span = strings.Replace(span, `"kind":2`, `"kind":2,"traceState":"`+bs.text+`"`, 1)
					want = fmt.Sprintf("not JSON: %s at byte offset %d", bs.reason, strings.Index(span, `"traceState":`)+len(`"traceState":`)+1)
				default:
					// The payload as the attribute's JSON string carries it:
					// a backslash escaped, a control byte as \u00XX.
					text := strings.ReplaceAll(bs.text, `\`, `\\`)
					for c := byte(0); c < 0x20; c++ {
						text = strings.ReplaceAll(text, string(c), fmt.Sprintf(`\u%04x`, c))
					}
					payload := `{\"n\":\"` + text + `\"}`
					span = strings.Replace(span, `{"key":"gen_ai.tool.name"`, `{"key":"gen_ai.tool.call.`+where+`","value":{"stringValue":"`+payload+`"}},{"key":"gen_ai.tool.name"`, 1)
					if where == "arguments" {
						span = strings.Replace(span, `,{"key":"gen_ai.tool.call.arguments","value":{"stringValue":"{\"path\":\"a\"}"}}`, "", 1)
					}
					want = fmt.Sprintf("gen_ai.tool.call.%s is not JSON: %s at byte offset 6", where, bs.reason)
				}
				doc := oneDoc("thegram", oneSpan(1, "gram_read"), span, oneSpan(3, "gram_read"))
				for _, keep := range []bool{true, false} {
					recs, rejected, _ := viaStream(t, strings.NewReader(doc), "t.json", keep)
					if len(rejected) != 1 || !strings.Contains(rejected[0], "spans[1]") || !strings.Contains(rejected[0], want) {
						t.Fatalf("keep %v: rejected %q, want spans[1] rejected with %q", keep, rejected, want)
					}
					if len(recs) != 2 {
						t.Fatalf("keep %v: %d spans read, want the other 2", keep, len(recs))
					}
				}
			})
		}
	}
}
