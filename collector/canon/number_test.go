package canon

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// TestValidNumber: RFC 8259's number grammar, and nothing fastjson adds.
func TestValidNumber(t *testing.T) {
	f := func(s string, want bool) {
		t.Helper()
		if got := ValidNumber([]byte(s)); got != want {
			t.Errorf("ValidNumber(%q) = %v, want %v", s, got, want)
		}
	}
	for _, s := range []string{"0", "-0", "7", "-12", "0.5", "1e-7", "1E+2", "1e5", "-0.0e0", "123456789012345678901234567890", "1.5E-300"} {
		f(s, true)
	}
	for _, s := range []string{"", "-", "+1", "01", "-01", "1.", ".5", "1.2.3", "1e", "1e+", "0x10", "NaN", "nan", "inf", "-Inf", "Infinity", "1e5.5", "--1", "1-", "00"} {
		f(s, false)
	}
}

// TestBadNumber: the first number that is not JSON, with its offset, in
// text fastjson took or tripped on; strings, keys and literals are not
// numbers.
func TestBadNumber(t *testing.T) {
	f := func(data string, wantAt int, wantToken string) {
		t.Helper()
		at, tok := BadNumber([]byte(data))
		if at != wantAt || string(tok) != wantToken {
			t.Errorf("BadNumber(%q) = %d %q, want %d %q", data, at, tok, wantAt, wantToken)
		}
	}
	f(`{"a":[1,-0,1e-7,true,false,null,"NaN 01 \"1.2.3"]}`, -1, "")
	f(`{"01":1}`, -1, "")
	f(`{"a": NaN}`, 6, "NaN")
	f(`[1, 2,nan]`, 6, "nan")
	f(`{"a":1.2.3,"b":NaN}`, 5, "1.2.3")
	f(`{"a":-Infinity}`, 5, "-Infinity")
	f(`[0x10]`, 1, "0x10")
	f("[\n+1\n]", 2, "+1")
	f(`{"a":nul}`, -1, "") // not meant as a number: the parser names it
}

// TestParseError_Number: where fastjson trips inside a number that is not
// JSON, the number is named, at its start.
func TestParseError_Number(t *testing.T) {
	f := func(data, want string) {
		t.Helper()
		_, err := new(fastjson.Parser).Parse(data)
		if err == nil {
			t.Fatalf("%q parsed", data)
		}
		if got := ParseError([]byte(data), err); got != want {
			t.Errorf("ParseError(%q)\n got %q\nwant %q", data, got, want)
		}
	}
	f(`{"a":-Infinity}`, `-Infinity is not a JSON number at byte offset 5; unparsed tail: "inity}"`)
	f(`{"a":0x10}`, `0x10 is not a JSON number at byte offset 5; unparsed tail: "x10}"`)
	f(`{"a":1.5,"b":Infinity}`, `Infinity is not a JSON number at byte offset 13; unparsed tail: "inity}"`)
	// A number that is not JSON after where fastjson failed is not the fault.
	f(`{"a" 1,"b":NaN}`, `missing ':' after object key at byte offset 5; unparsed tail: "1,\"b\":NaN}"`)
}

// FuzzBadNumber: text fastjson takes and in which BadNumber finds no
// number that is not JSON is JSON, and the other way round, as
// encoding/json's Valid says; Valid of its parse finds a fault exactly
// where BadNumber or BadString finds one, and Fault names the number when
// it comes first.
func FuzzBadNumber(f *testing.F) {
	for _, s := range []string{`{"a":[1,-0,1e-7,1E+2,0.5]}`, `NaN`, `[nan]`, `{"a":1.2.3}`, `[+1,01,1.,.5,1e,0x10]`, `"\"1.2\\"`, `{"n":-Infinity}`, `[inf,-inf]`, `123456789012345678901234567890`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 256 {
			return
		}
		var p fastjson.Parser
		v, err := p.ParseBytes(b)
		at, tok := BadNumber(b)
		if err == nil {
			sat, _ := BadString(b)
			if ok := Valid(v); ok != (at < 0 && sat < 0) {
				t.Fatalf("%q: Valid %v, BadNumber %d %q, BadString %d", b, ok, at, tok, sat)
			}
			if want := numberReason(tok) + " at byte offset " + strconv.Itoa(at); at >= 0 && (sat < 0 || at < sat) && Fault(b) != want {
				t.Fatalf("%q: Fault %q, want %q", b, Fault(b), want)
			}
		}
		if err == nil && at < 0 && !json.Valid(b) {
			// fastjson also takes strings encoding/json refuses (control
			// bytes, escapes like \0): not numbers, not this check's.
			var se *json.SyntaxError
			if errors.As(json.Unmarshal(b, new(json.RawMessage)), &se) && (strings.Contains(se.Error(), " in string ") || strings.Contains(se.Error(), "escape")) {
				return
			}
		}
		if ours, std := err == nil && at < 0, json.Valid(b); ours != std {
			t.Fatalf("%q: fastjson %v, BadNumber %d %q; json.Valid %v", b, err, at, tok, std)
		}
		if at >= 0 && (at+len(tok) > len(b) || string(b[at:at+len(tok)]) != string(tok) || ValidNumber(tok)) {
			t.Fatalf("%q: BadNumber %d %q", b, at, tok)
		}
	})
}

// BenchmarkNumbers: the cost per call record of the check, as the tree
// walk (Valid: numbers, strings and keys, what ingest runs) and as a read
// of the bytes for numbers (BadNumber), beside fastjson's parse of the
// same line.
func BenchmarkNumbers(b *testing.B) {
	line := []byte(`{"time":"2026-11-02T10:00:01.123456Z","server":"thegram","session":"s-0042","client":"claude-code/1.2","request":{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"gram_patch","arguments":{"base_revision":41,"context":{"note":"fix the heading"},"expected_hash":"9f2c1e","operations":[{"op":"replace","path":"/title","value":"Quarterly report, Q3 \"draft\""},{"op":"add","path":"/tags/-","value":"finance"}],"path":"reports/q3.gram","request_id":"b6c1f0e2-5d7a-4b8e-9a3f-1c2d3e4f5a6b"}}},"response":{"jsonrpc":"2.0","id":17,"result":{"content":[{"type":"text","text":"patched reports/q3.gram to rev 42"}],"structuredContent":{"hash":"a81b2c","path":"reports/q3.gram","rev":42}}},"duration_ms":38.5}`)
	var p fastjson.Parser
	v, err := p.ParseBytes(line)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("parse", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for range b.N {
			p.ParseBytes(line)
		}
	})
	v, _ = p.ParseBytes(line)
	b.Run("Valid", func(b *testing.B) {
		// Numbers, strings and keys: what ingest runs.
		b.SetBytes(int64(len(line)))
		for range b.N {
			if !Valid(v) {
				b.Fatal("bad")
			}
		}
	})
	b.Run("BadNumber", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for range b.N {
			if at, _ := BadNumber(line); at >= 0 {
				b.Fatal("bad")
			}
		}
	})
}
