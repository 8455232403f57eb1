package capture

import (
	"strings"
	"testing"
	"testing/iotest"

	"github.com/mcpaudit/mcpaudit/collector/canon"
)

// TestCursor_SkipString: a string ends at its first quote not escaped by
// an odd run of backslashes, wherever the window's reads cut the text.
func TestCursor_SkipString(t *testing.T) {
	f := func(s string) {
		t.Helper()
		want := canon.StringEnd([]byte(s), 0)
		for _, one := range []bool{false, true} {
			var r = strings.NewReader(s + "!")
			c := newCursor(r, 64, 1<<20)
			if one {
				c = newCursor(iotest.OneByteReader(strings.NewReader(s+"!")), 1, 1<<20)
			}
			c.fill()
			if err := c.skipString(); err != nil {
				t.Fatalf("skipString(%s): %v", s, err)
			}
			if got := int(c.pos()); got != want {
				t.Errorf("skipString(%s) one byte %v ends at %d, want %d", s, one, got, want)
			}
		}
	}
	f(`"a"`)
	f(`"a\"b"`)
	f(`"a\\"`)
	f(`"a\\\"b"`)
	f(`"\\\\\\\\"`)
	f(`"{\"path\":\"x\",\"n\":[1]}"`)
	f(`"` + strings.Repeat(`\\`, 37) + `\""`)
	f(`""`)
}

// TestCursor_LineEndInString: a line end inside a string is a string cut
// off, found where it is.
func TestCursor_LineEndInString(t *testing.T) {
	c := newCursor(strings.NewReader("\"abc\n{}"), 64, 1<<20)
	c.fill()
	err := c.skipString()
	se, ok := err.(*syntaxError)
	if !ok || se.Offset != 4 || se.Line != 1 {
		t.Fatalf("err = %v", err)
	}
}
