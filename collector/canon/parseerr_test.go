package canon

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// TestParseError: fastjson's error for a line becomes one reason with the
// byte offset it failed at, its unparsed tail kept, however deep the
// line nests.
func TestParseError(t *testing.T) {
	f := func(data, want string) {
		t.Helper()
		_, err := new(fastjson.Parser).Parse(data)
		if err != nil {
			if got := ParseError([]byte(data), err); got != want {
				t.Errorf("ParseError(%.60q)\n got %.300q\nwant %q", data, got, want)
			}
			return
		}
		t.Errorf("%.60q parsed", data)
	}
	f(`{"time":"x"`, `unexpected end of object at byte offset 11; unparsed tail: ""`)
	f(`{"a":[1,2,}`, `cannot parse number: unexpected char: "}" at byte offset 10; unparsed tail: "}"`)
	f(`{"a":{"b":"c}`, `cannot parse string: missing closing '"' at byte offset 13; unparsed tail: ""`)
	f("{\"a\":\xff}", `cannot parse number: unexpected char: "\xff" at byte offset 5; unparsed tail: "\xff}"`)
	f(`{"a":1} x`, `unexpected tail: "x" at byte offset 8`)
	// A tail longer than fastjson quotes whole: the offset comes from
	// encoding/json.
	long := `{"a":[1,2,}` + strings.Repeat(" ", 100) + `"` + strings.Repeat("x", 100) + `"`
	f(long, `cannot parse number: unexpected char: "}" at byte offset 10; unparsed tail: "}                                       ...xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\""`)

	// Nested past fastjson's limit: where the 301st level starts, counted
	// as fastjson counts (a scalar is a level; an object's key is not).
	deep := func(prefix string, n int, inner string) string {
		return prefix + strings.Repeat(`[`, n) + inner + strings.Repeat(`]`, n) + "}"
	}
	const tail = `; unparsed tail: "`
	got := func(data string) string {
		_, err := new(fastjson.Parser).Parse(data)
		return ParseError([]byte(data), err)
	}
	for _, c := range []struct {
		data string
		at   int
	}{
		{deep(`{"args":`, 305, ``), 8 + 299},
		{deep(`{"args":`, 299, `{"k":"v"}`), 8 + 299},
		{deep(`{"args":`, 299, `{"k":1}`), 8 + 299},
		{deep(`{"args":`, 299, `"v"`), 8 + 299},
		{deep(`{"args": `, 298, `{"k": "v", "l": 7}`), 9 + 298 + len(`{"k": `)},
		{deep(`{"args":`, 299, `{"k[":"v]"}`), 8 + 299},
	} {
		msg := got(c.data)
		want := "nested deeper than 300 levels at byte offset " + strconv.Itoa(c.at) + tail
		if !strings.HasPrefix(msg, want) || len(msg) > 300 {
			t.Errorf("%.40q...: got %.300q, want it to start %q and be short", c.data, msg, want)
		}
	}
}

// FuzzParseError: for any input fastjson refuses, ParseError returns, and
// the offset it names (if any) is inside the input or at its end.
func FuzzParseError(f *testing.F) {
	for _, s := range []string{`{"a":`, `[[[`, `{"a":1} x`, `{"a":"\`, "\xff", strings.Repeat("[", 301), strings.Repeat(`{"k":`, 301)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := new(fastjson.Parser).ParseBytes(b)
		if err == nil {
			return
		}
		msg := ParseError(b, err)
		if i := strings.Index(msg, " at byte offset "); i >= 0 {
			var n int
			if _, err := fmt.Sscan(msg[i+len(" at byte offset "):], &n); err != nil || n < 0 || n > len(b) {
				t.Fatalf("%q: offset in %q outside 0-%d", b, msg, len(b))
			}
		}
	})
}
