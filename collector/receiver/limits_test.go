package receiver

import "testing"

func TestJSONDepth(t *testing.T) {
	f := func(in string, limit, wantDepth, wantAt int) {
		t.Helper()
		d, at := jsonDepth([]byte(in), limit)
		if d != wantDepth || at != wantAt {
			t.Errorf("jsonDepth(%q, %d) = %d, %d; want %d, %d", in, limit, d, at, wantDepth, wantAt)
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

// FuzzJSONDepth checks jsonDepth against the byte-by-byte scan it
// replaced.
func FuzzJSONDepth(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":"x\"]"}]}`, `"\\\\"[[`, `[[["\`} {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		if limit < 0 || limit > 64 {
			return
		}
		d, at := jsonDepth(b, limit)
		wd, wat := jsonDepthSlow(b, limit)
		if d != wd || at != wat {
			t.Fatalf("jsonDepth(%q, %d) = %d, %d; the scan says %d, %d", b, limit, d, at, wd, wat)
		}
	})
}

func jsonDepthSlow(b []byte, limit int) (depth, at int) {
	d := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
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
