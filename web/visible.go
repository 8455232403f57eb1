package web

import (
	"strconv"
	"strings"
	"unicode"
)

// visible returns a rendered page with every invisible format character
// (bidirectional controls, zero-width spaces and joiners: Unicode's Cf)
// and every control character but newline, tab and carriage return shown
// as its code point, "<U+202E>" (escaped for HTML). html/template escapes
// markup but passes these through, and the values on a page are the
// senders' (document names, tools, sessions, tenants, error messages):
// a right-to-left override in a document name would show
// "rtl/<RLO>gnp.exe" as "rtl/exe.png", two tenants that differ by a
// zero-width space would look alike. The templates hold none of them, and
// links carry the values percent-encoded, so only what a sender chose is
// rewritten. The command line shows them as '?' (cmd/mcpaudit printable.go).
func visible(page string) string {
	if strings.IndexFunc(page, hidden) < 0 {
		return page
	}
	var b strings.Builder
	b.Grow(len(page) + 64)
	for _, r := range page {
		if !hidden(r) {
			b.WriteRune(r)
			continue
		}
		b.WriteString("&lt;U+")
		h := strings.ToUpper(strconv.FormatInt(int64(r), 16))
		for i := len(h); i < 4; i++ {
			b.WriteByte('0')
		}
		b.WriteString(h)
		b.WriteString("&gt;")
	}
	return b.String()
}

func hidden(r rune) bool {
	switch r {
	case '\n', '\t', '\r':
		return false
	}
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}
