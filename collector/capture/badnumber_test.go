package capture

import (
	"fmt"
	"strings"
	"testing"
)

// badNumbers are number tokens fastjson takes or trips on that are not
// JSON numbers (RFC 8259 §6); Python's json.dumps writes the first two.
var badNumbers = []string{"NaN", "-Infinity", "nan", "+1", "01", "1.", ".5", "1.2.3", "1e", "0x10"}

// goodNumbers are JSON numbers that must be taken and kept as written.
const goodNumbers = `[-0,1e-7,1E+2,0.5,123456789012345678901234567890,-12345678901234567890.5e-300]`

// badNumberLine is a call record whose arguments hold tok as a number.
func badNumberLine(i int, n string) string {
	return fmt.Sprintf(`{"time":"2026-11-02T10:00:0%dZ","server":"thegram","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_read","arguments":{"n":%s,"path":"a.gram"}}},"response":{"jsonrpc":"2.0","id":%d,"result":{"content":[]}}}`, i%10, i, n, i)
}

// TestAnalyze_NumbersNotJSON: in a file of call records (mcpaudit
// analyze), a line with a number that is not JSON is rejected alone, as not
// JSON, naming the number and its byte offset in the line; the lines
// beside it are read, their valid numbers kept as written.
func TestAnalyze_NumbersNotJSON(t *testing.T) {
	for _, tok := range badNumbers {
		t.Run(tok, func(t *testing.T) {
			bad := badNumberLine(2, tok)
			in := badNumberLine(1, goodNumbers) + "\n" + bad + "\n" + badNumberLine(3, "7") + "\n"
			for _, keep := range []bool{true, false} {
				recs, rejected, _ := viaStream(t, strings.NewReader(in), "f.ndjson", keep)
				want := fmt.Sprintf("f.ndjson:2: not JSON: %s is not a JSON number at byte offset %d", tok, strings.Index(bad, `"n":`)+4)
				if len(rejected) != 1 || !strings.HasPrefix(rejected[0], want) {
					t.Fatalf("keep %v: rejected %q, want one starting %q", keep, rejected, want)
				}
				if len(recs) != 2 || recs[0].Call.RPCID != "1" || recs[1].Call.RPCID != "3" {
					t.Fatalf("keep %v: %d calls read, want lines 1 and 3", keep, len(recs))
				}
				if keep {
					if got, want := string(recs[0].Call.Arguments), `{"n":`+goodNumbers+`,"path":"a.gram"}`; got != want {
						t.Fatalf("arguments %s, want %s as written", got, want)
					}
				}
			}
		})
	}
	// A number anywhere in the line, not only in the payloads.
	line := strings.Replace(badNumberLine(1, "1"), `"server"`, `"duration_ms":NaN,"server"`, 1)
	_, rejected, _ := viaStream(t, strings.NewReader(line+"\n"), "f.ndjson", false)
	if want := fmt.Sprintf("f.ndjson:1: not JSON: NaN is not a JSON number at byte offset %d", strings.Index(line, "NaN")); len(rejected) != 1 || rejected[0] != want {
		t.Fatalf("rejected %q, want %q", rejected, want)
	}
}

// TestAnalyze_OTLPNumbersNotJSON: in an OTLP JSON file, a span whose
// gen_ai.tool.call.arguments or result, or whose own JSON, holds a number
// that is not JSON is rejected alone with the number and its byte offset;
// the spans beside it are read.
func TestAnalyze_OTLPNumbersNotJSON(t *testing.T) {
	for _, tok := range badNumbers {
		for _, where := range []string{"arguments", "result", "span"} {
			t.Run(tok+"/"+where, func(t *testing.T) {
				span := oneSpan(2, "gram_read")
				var want string
				switch where {
				case "span":
					span = strings.Replace(span, `"kind":2`, `"kind":2,"droppedEventsCount":`+tok, 1)
					want = fmt.Sprintf("not JSON: %s is not a JSON number at byte offset %d", tok, strings.Index(span, `"droppedEventsCount":`)+len(`"droppedEventsCount":`))
				default:
					payload := `{\"n\":` + tok + `}`
					span = strings.Replace(span, `{"key":"gen_ai.tool.name"`, `{"key":"gen_ai.tool.call.`+where+`","value":{"stringValue":"`+payload+`"}},{"key":"gen_ai.tool.name"`, 1)
					if where == "arguments" {
						span = strings.Replace(span, `,{"key":"gen_ai.tool.call.arguments","value":{"stringValue":"{\"path\":\"a\"}"}}`, "", 1)
					}
					want = fmt.Sprintf("gen_ai.tool.call.%s is not JSON: %s is not a JSON number at byte offset 5", where, tok)
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
