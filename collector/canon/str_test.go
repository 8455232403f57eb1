package canon

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// TestStringFault: the first byte of a string's text that makes it no
// JSON string, and the reason named for it; every JSON escape passes.
func TestStringFault(t *testing.T) {
	f := func(s string, wantAt int, wantReason string) {
		t.Helper()
		at := StringFault([]byte(s))
		reason := ""
		if at >= 0 {
			reason = stringReason([]byte(s), at)
		}
		if at != wantAt || reason != wantReason {
			t.Errorf("StringFault(%q) = %d %q, want %d %q", s, at, reason, wantAt, wantReason)
		}
	}
	f(``, -1, "")
	f(`plain é 日本`, -1, "")
	f(`\"\\\/\b\f\n\r\t\u00e9\u00E9\uD83D\ude00\u0000x`, -1, "")
	f("ab\x01", 2, "a control byte 0x01 inside a string")
	f("\x00", 0, "a control byte 0x00 inside a string")
	f("a\nb", 1, "a control byte 0x0A inside a string")
	f("\x1f", 0, "a control byte 0x1F inside a string")
	f("\x7f\x80\xff", -1, "") // DEL and bytes past ASCII are JSON (UTF-8 is checked elsewhere)
	f(`ab\0`, 2, `invalid escape \0`)
	f(`\n\x41`, 2, `invalid escape \x`)
	f(`\'`, 0, `invalid escape \'`)
	f(`\U0041`, 0, `invalid escape \U`)
	f(`\u12`, 0, `invalid escape \u12 (\u takes 4 hex digits)`)
	f(`\u`, 0, `invalid escape \u (\u takes 4 hex digits)`)
	f(`\u12g4`, 0, `invalid escape \u12g4 (\u takes 4 hex digits)`)
	f(`x\u12\n`, 1, `invalid escape \u12 (\u takes 4 hex digits)`)
	f(`\`, 0, `a lone backslash at the end of a string`)
	f(`\ `, 0, `invalid escape: a backslash before byte 0x20`)
	f("\\\x01", 0, `invalid escape: a backslash before byte 0x01`)
	f("\\\xc3\xa9", 0, `invalid escape: a backslash before byte 0xC3`)
}

// TestFault: the first number or string of a parsed text that is not
// JSON, whichever comes first, with its byte offset; keys are strings.
func TestFault(t *testing.T) {
	f := func(s, want string) {
		t.Helper()
		if got := Fault([]byte(s)); got != want {
			t.Errorf("Fault(%q) = %q, want %q", s, got, want)
		}
	}
	f(`{"a":"\"x\\","b":[1,"\u00e9"]}`, "")
	f(`{"a":"x\0","b":NaN}`, `invalid escape \0 at byte offset 7`)
	f(`{"a":NaN,"b":"x\0"}`, `NaN is not a JSON number at byte offset 5`)
	f("{\"k\x01\":1}", `a control byte 0x01 inside a string at byte offset 3`)
	f(`["\\",  "\\\x"]`, `invalid escape \x at byte offset 11`)
}

// TestValid: the walk of fastjson's tree reads its Value as it is (a
// fastjson whose Value changed fails here first), and finds a number,
// string or key that is not JSON where Fault does, and none where Fault
// finds none, through the mirror and without it.
func TestValid(t *testing.T) {
	if !mirrorFits {
		t.Fatal("valueMirror does not fit fastjson.Value: update it to the fastjson in go.mod")
	}
	defer func(fits bool) { mirrorFits = fits }(mirrorFits)
	for _, fits := range []bool{true, false} {
		mirrorFits = fits
		f := func(s, wantFault string) {
			t.Helper()
			var p fastjson.Parser
			v, err := p.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			if got := Valid(v); got != (wantFault == "") {
				t.Errorf("mirror %v: Valid(%q) = %v, want %v", fits, s, got, wantFault == "")
			}
			if got := Fault([]byte(s)); got != wantFault {
				t.Errorf("Fault(%q) = %q, want %q", s, got, wantFault)
			}
		}
		f(`{"a\n\u00e9":[1,"\"\\\/\b\f\n\r\t\ud83d\ude00",true,null,{"b\"":{"c":["x"]}}]}`, "")
		f(`{"a":[-0,1e-7,1E+2,0.5,123456789012345678901234567890,"NaN",true,null,{"b":{"c":[7]}}]}`, "")
		f(`7`, "")
		f(`"\u00e9"`, "")
		f(`"\u12"`, `invalid escape \u12 (\u takes 4 hex digits) at byte offset 1`)
		f(`{"z":"y","a":[1,{"b":"\x"}]}`, `invalid escape \x at byte offset 22`)
		f(`{"z":"y","a":[1,{"\x":"b"}]}`, `invalid escape \x at byte offset 18`)
		f("[\"a\x01\"]", `a control byte 0x01 inside a string at byte offset 3`)
		f("{\"a\x01\":{}}", `a control byte 0x01 inside a string at byte offset 3`)
		f(`["\0",NaN]`, `invalid escape \0 at byte offset 2`)
		f(`["x",NaN]`, `NaN is not a JSON number at byte offset 5`)
		for _, tok := range []string{"NaN", "nan", "inf", "+1", "01", "1.", ".5", "1.2.3", "1e", "1e+", "-1-"} {
			f(tok, tok+" is not a JSON number at byte offset 0")
			f(`{"a":[1,{"b":`+tok+`}]}`, tok+" is not a JSON number at byte offset 13")
			f(`{"z":"y","a":`+tok+`}`, tok+" is not a JSON number at byte offset 13")
		}
	}
}

// FuzzValid: text fastjson takes and Valid passes is JSON, and the other
// way round, as encoding/json's Valid says (numbers and strings both);
// Fault names a fault exactly when Valid finds one.
func FuzzValid(f *testing.F) {
	for _, s := range []string{`{"a":"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"}`, `"\0"`, `"\x41"`, `"\u12"`, `["\u12zz"]`, "\"\x01\"", `{"\'":1}`, `"\ "`, `[NaN,"\q"]`, `"\\\\\""`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 256 {
			return
		}
		var p fastjson.Parser
		v, err := p.ParseBytes(b)
		if err != nil {
			if json.Valid(b) {
				t.Fatalf("%q: fastjson %v; json.Valid true", b, err)
			}
			return
		}
		ok := Valid(v)
		fault := Fault(b)
		if ok != (fault == "") {
			t.Fatalf("%q: Valid %v, Fault %q", b, ok, fault)
		}
		if std := json.Valid(b); ok != std {
			t.Fatalf("%q: Valid %v (%s); json.Valid %v", b, ok, fault, std)
		}
	})
}

// TestParseError_String: where fastjson fails past a string that is not
// JSON, the string is the first fault, named; one after where it failed
// is not.
func TestParseError_String(t *testing.T) {
	f := func(data, want string) {
		t.Helper()
		var p fastjson.Parser
		_, err := p.Parse(data)
		if err == nil {
			t.Fatalf("%q parsed", data)
		}
		if got := ParseError([]byte(data), err); got != want {
			t.Errorf("ParseError(%q)\n got %q\nwant %q", data, got, want)
		}
	}
	f(`{"a":"\x41","b" 1}`, `invalid escape \x at byte offset 6; unparsed tail: "1}"`)
	f(`{"a" 1,"b":"\x41"}`, `missing ':' after object key at byte offset 5; unparsed tail: "1,\"b\":\"\\x41\"}"`)
}

// TestStringFault_Lengths: a fault at every place of strings of every
// length up to 40 is found there, whichever words read it.
func TestStringFault_Lengths(t *testing.T) {
	for n := 1; n <= 40; n++ {
		for pos := range n {
			for _, bad := range []string{"\x01", `\q`, `\u1z`} {
				s := []byte(strings.Repeat("a", n))
				s = append(s[:pos], append([]byte(bad), s[pos:]...)...)
				if at := StringFault(s); at != pos {
					t.Fatalf("StringFault(%q) = %d, want %d", s, at, pos)
				}
			}
			good := []byte(strings.Repeat("a", n))
			copy(good[pos:], `\n`)
			if at := StringFault(good); at != -1 && pos != n-1 { // at n-1 only the backslash fits
				t.Fatalf("StringFault(%q) = %d, want -1", good, at)
			}
		}
	}
}

// TestWordSpecial: every byte value at every place of a word, among
// plain bytes and after a byte that borrows, is found or not as
// stringSpecial has it.
func TestWordSpecial(t *testing.T) {
	for _, fill := range []byte{'a', 0x20, 0xff, 0x80} {
		for pos := range 8 {
			for c := range 256 {
				w := make([]byte, 8)
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(c)
				if got := wordSpecial(binary.LittleEndian.Uint64(w)); got != stringSpecial[c] {
					t.Fatalf("wordSpecial(% x) = %v", w, got)
				}
				if got := halfSpecial(binary.LittleEndian.Uint32(w[min(pos, 4):])); got != stringSpecial[c] {
					t.Fatalf("halfSpecial(% x) = %v", w[min(pos, 4):min(pos, 4)+4], got)
				}
			}
		}
	}
}
