package capture

import (
	"fmt"
	"strings"
	"testing"
)

// notJSON is a value fastjson takes (or trips on) that is not JSON: text
// as it stands after a key, the reason the rejection names, the fault's
// offset within text, and whether fastjson trips on it (the reason is then
// followed by the text it left unparsed).
type notJSON struct {
	text, reason string
	at           int
	trips        bool
}

// notJSONKinds are the values that are not JSON, by kind: numbers (RFC
// 8259 §6; Python's json.dumps writes the first two) and strings (§7),
// each with JSON values of the kind that must be taken and kept as
// written, whether it can be a key, and a span field that takes it.
var notJSONKinds = []struct {
	name, good string
	keys       bool
	spanField  string
	bad        []notJSON
}{
	{
		name: "number", spanField: "droppedEventsCount",
		good: `[-0,1e-7,1E+2,0.5,123456789012345678901234567890,-12345678901234567890.5e-300]`,
		bad: func() []notJSON {
			var v []notJSON
			for _, tok := range []string{"NaN", "-Infinity", "nan", "+1", "01", "1.", ".5", "1.2.3", "1e", "0x10"} {
				v = append(v, notJSON{tok, tok + " is not a JSON number", 0, tok == "-Infinity" || tok == "0x10"})
			}
			return v
		}(),
	},
	{
		// Every JSON escape, kept byte for byte.
		name: "string", spanField: "traceState", keys: true,
		good: `"\"\\\/\b\f\n\r\t\u00e9\u00E9\ud83d\ude00 é"`,
		bad: func() []notJSON {
			var v []notJSON
			for _, s := range []struct{ text, reason string }{
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
			} {
				// The fault is at the text's first byte, after the quote.
				v = append(v, notJSON{`"` + s.text + `"`, s.reason, 1, false})
			}
			return v
		}(),
	},
}

// names reports whether the reject got is want, followed by the text
// fastjson left unparsed when v trips it.
func (v notJSON) names(got, want string) bool {
	if v.trips {
		return strings.HasPrefix(got, want+"; unparsed tail: ")
	}
	return got == want
}

// valueLine is a call record whose arguments hold v under the key "n".
func valueLine(i int, v string) string {
	return fmt.Sprintf(`{"time":"2026-11-02T10:00:0%dZ","server":"thegram","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_read","arguments":{"n":%s,"path":"a.gram"}}},"response":{"jsonrpc":"2.0","id":%d,"result":{"content":[]}}}`, i%10, i, v, i)
}

// TestAnalyze_NotJSON: in a file of call records (mcpaudit analyze), a
// line with a number, string or key that is not JSON is rejected alone,
// as not JSON, with the reason and its byte offset in the line; the lines
// beside it are read, their valid numbers and escapes kept as written.
func TestAnalyze_NotJSON(t *testing.T) {
	for _, k := range notJSONKinds {
		for _, v := range k.bad {
			wheres := []string{"value"}
			if k.keys {
				wheres = append(wheres, "key")
			}
			for _, where := range wheres {
				t.Run(fmt.Sprintf("%s/%q/%s", k.name, v.text, where), func(t *testing.T) {
					bad := valueLine(2, v.text)
					at := strings.Index(bad, `"n":`) + 4 + v.at
					if where == "key" {
						bad = strings.Replace(valueLine(2, "1"), `"path"`, v.text+`:1,"path"`, 1)
						at = strings.Index(bad, `"n":1,`) + 6 + v.at
					}
					in := valueLine(1, k.good) + "\n" + bad + "\n" + valueLine(3, "7") + "\n"
					for _, keep := range []bool{true, false} {
						recs, rejected, _ := viaStream(t, strings.NewReader(in), "f.ndjson", keep)
						want := fmt.Sprintf("f.ndjson:2: not JSON: %s at byte offset %d", v.reason, at)
						if len(rejected) != 1 || !v.names(rejected[0], want) {
							t.Fatalf("keep %v: rejected %q, want one: %q", keep, rejected, want)
						}
						if len(recs) != 2 || recs[0].Call.RPCID != "1" || recs[1].Call.RPCID != "3" {
							t.Fatalf("keep %v: %d calls read, want lines 1 and 3", keep, len(recs))
						}
						if keep {
							if got, want := string(recs[0].Call.Arguments), `{"n":`+k.good+`,"path":"a.gram"}`; got != want {
								t.Fatalf("arguments %s, want %s as written", got, want)
							}
						}
					}
				})
			}
		}
	}
	// A number anywhere in the line, not only in the payloads.
	line := strings.Replace(valueLine(1, "1"), `"server"`, `"duration_ms":NaN,"server"`, 1)
	_, rejected, _ := viaStream(t, strings.NewReader(line+"\n"), "f.ndjson", false)
	if want := fmt.Sprintf("f.ndjson:1: not JSON: NaN is not a JSON number at byte offset %d", strings.Index(line, "NaN")); len(rejected) != 1 || rejected[0] != want {
		t.Fatalf("rejected %q, want %q", rejected, want)
	}
}

// TestAnalyze_OTLPNotJSON: in an OTLP JSON file, a span whose
// gen_ai.tool.call.arguments or result, or whose own JSON, holds a number
// or string that is not JSON is rejected alone with the reason and its
// byte offset; the spans beside it are read.
func TestAnalyze_OTLPNotJSON(t *testing.T) {
	for _, k := range notJSONKinds {
		for _, v := range k.bad {
			for _, where := range []string{"arguments", "result", "span"} {
				t.Run(fmt.Sprintf("%s/%q/%s", k.name, v.text, where), func(t *testing.T) {
					span := oneSpan(2, "gram_read")
					var want string
					switch where {
					case "span":
						field := `"` + k.spanField + `":`
						span = strings.Replace(span, `"kind":2`, `"kind":2,`+field+v.text, 1)
						want = fmt.Sprintf("not JSON: %s at byte offset %d", v.reason, strings.Index(span, field)+len(field)+v.at)
					default:
						// The payload as the attribute's JSON string carries it:
						// a backslash escaped, a control byte as \u00XX.
						text := strings.ReplaceAll(v.text, `\`, `\\`)
						text = strings.ReplaceAll(text, `"`, `\"`)
						for c := byte(0); c < 0x20; c++ {
							text = strings.ReplaceAll(text, string(c), fmt.Sprintf(`\u%04x`, c))
						}
						payload := `{\"n\":` + text + `}`
						span = strings.Replace(span, `{"key":"gen_ai.tool.name"`, `{"key":"gen_ai.tool.call.`+where+`","value":{"stringValue":"`+payload+`"}},{"key":"gen_ai.tool.name"`, 1)
						if where == "arguments" {
							span = strings.Replace(span, `,{"key":"gen_ai.tool.call.arguments","value":{"stringValue":"{\"path\":\"a\"}"}}`, "", 1)
						}
						want = fmt.Sprintf("gen_ai.tool.call.%s is not JSON: %s at byte offset %d", where, v.reason, 5+v.at)
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
}
