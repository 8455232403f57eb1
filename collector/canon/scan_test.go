package canon

import (
	"strings"
	"testing"
)

func TestStringEnd(t *testing.T) {
	f := func(s string, want int) {
		t.Helper()
		if got := StringEnd([]byte(s), 0); got != want {
			t.Errorf("StringEnd(%s) = %d, want %d", s, got, want)
		}
	}
	long := strings.Repeat("x", 40)
	f(`"a"`, 3)
	f(`"a\"b"`, 6)
	f(`"a\\"b`, 5)
	f(`"`+long+`"`, 42)
	f(`"`+long+`\"`+long+`"x`, 84)
	f(`"`+long+`\\\\"x`, 46)
	f(`"`+long+`\`, 42)
	f(`"abc`, 4)
}
