package receiver

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestJSONScan_Depth(t *testing.T) {
	f := func(in string, limit, wantDepth, wantAt int) {
		t.Helper()
		d, at, _ := jsonScan([]byte(in), limit)
		if d != wantDepth || at != wantAt {
			t.Errorf("jsonScan(%q, %d) = depth %d at %d; want %d, %d", in, limit, d, at, wantDepth, wantAt)
		}
	}
	f(``, 2, 0, -1)
	f(`{"a":[1,{"b":2}]}`, 3, 3, -1)
	f(`{"a":[1,{"b":2}]}`, 2, 3, 8)
	// Brackets inside strings do not nest, escaped quotes do not end them.
	f(`{"a":"[[[{{{"}`, 1, 1, -1)
	f(`{"a":"x\"[[[\"{{"}`, 1, 1, -1)
	f(`{"a":"x\\"}`+`[[`, 1, 2, 12)
	f(`{"a":"x\\\"[["}`, 1, 1, -1)
	f(`["\\\\",[`+`[`, 2, 3, 9)
	// An unterminated string hides the rest.
	f(`{"a":"[[[`, 1, 1, -1)
	f(`{"a":"x\`, 1, 1, -1)
	// A second document counts too: the depth is of the whole body.
	f(`{} [[[`, 2, 3, 5)
	f(` [[`, 1, 2, 2)
}

func TestJSONScan_End(t *testing.T) {
	f := func(in string, limit, want int) {
		t.Helper()
		if _, _, end := jsonScan([]byte(in), limit); end != want {
			t.Errorf("jsonScan(%q, %d) ends the first object at %d; want %d", in, limit, end, want)
		}
	}
	f(``, 8, -1)
	f(`{}`, 8, 2)
	f(" \t\r\n{}\n{}", 8, 6)
	f(`{"a":"}"}x`, 8, 9)
	f(`{"a":[1,{"b":"x\"}"}]}{}`, 8, 22)
	// Only an object is looked for, and only one that closes.
	f(`[]{}`, 8, -1)
	f(`x{}`, 8, -1)
	f(`{"a":[`, 8, -1)
	f(`{"a":"}`, 8, -1)
	// Brackets are counted, not matched, as before.
	f(`{]x`, 8, 2)
	// Stopped at the limit: after the first object's end, it is known.
	f(`{"a":[[`, 1, -1)
	f(`{}[[`, 1, 2)
}

func TestStringEnd(t *testing.T) {
	f := func(in string, want int) {
		t.Helper()
		if got := stringEnd([]byte(in), 1); got != want {
			t.Errorf("stringEnd(%q) = %d; want %d", in, got, want)
		}
	}
	f(`""`, 1)
	f(`"abc"x`, 4)
	f(`"a\"b"`, 5)
	f(`"a\\"b"`, 4)
	f(`"a\\\"b"`, 7)
	f(`"\"\""`, 5)
	f(`"abc`, 4)
	f(`"ab\"`, 5)
}

// FuzzJSONScan checks jsonScan against the byte-by-byte scans it
// replaced: jsonDepthSlow for the depth, jsonValueEndSlow for the end of
// the first object; and, where the first object is JSON that encoding/json
// reads, that end against where encoding/json stops reading.
func FuzzJSONScan(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":"x\"]"}]}`, `"\\\\"[[`, `[[["\`, `{"a":1}
{"b":[2]}`, ` {"a":"}"} x`, `{]}`} {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		if limit < 0 || limit > 64 {
			return
		}
		d, at, end := jsonScan(b, limit)
		wd, wat := jsonDepthSlow(b, limit)
		if d != wd || at != wat {
			t.Fatalf("jsonScan(%q, %d) = depth %d at %d; the scan says %d, %d", b, limit, d, at, wd, wat)
		}
		wend := jsonValueEndSlow(b)
		if at >= 0 && wend > at {
			wend = -1 // stopped at the limit before the object closed
		}
		if end != wend {
			t.Fatalf("jsonScan(%q, %d) ends the first object at %d; the scan says %d", b, limit, end, wend)
		}
		if at >= 0 {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		var v json.RawMessage
		if err := dec.Decode(&v); err == nil && len(v) > 0 && v[0] == '{' && end != int(dec.InputOffset()) {
			t.Fatalf("jsonScan(%q, %d) ends the first object at %d; encoding/json at %d", b, limit, end, dec.InputOffset())
		}
	})
}

// jsonValueEndSlow is the end of the first object as jsonValueEnd found
// it, a byte at a time, before jsonScan took its place.
func jsonValueEndSlow(b []byte) int {
	start := len(b) - len(bytes.TrimLeft(b, " \t\r\n"))
	if start == len(b) || b[start] != '{' {
		return -1
	}
	d := 0
	for i := start; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEndSlow(b, i+1)
		case '{', '[':
			d++
		case '}', ']':
			d--
			if d == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// stringEndSlow is stringEnd a byte at a time.
func stringEndSlow(b []byte, i int) int {
	for ; i < len(b) && b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i
}

func jsonDepthSlow(b []byte, limit int) (depth, at int) {
	d := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEndSlow(b, i+1)
		case '{', '[':
			d++
			if d > depth {
				depth = d
				if depth > limit {
					return depth, i
				}
			}
		case '}', ']':
			d--
		}
	}
	return depth, -1
}

func TestBadText(t *testing.T) {
	f := func(in string, want int) {
		t.Helper()
		if got := badText(in); got != want {
			t.Errorf("badText(%q) = %d; want %d", in, got, want)
		}
	}
	f("", -1)
	f("thegram/tool-1", -1)
	f("a\tb", 1)
	f("ab\x7f", 2)
	f("café", -1)
	f("café\x00", 5)
	f("x\u0085y", 1) // a C1 control
	f("ab\xffc", 2)
	f("é\xff", 2)
	f("ok \ufffd", -1) // a genuine replacement character
	f("日本\n", 6)
}
