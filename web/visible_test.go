package web

import (
	"net/url"
	"strings"
	"testing"
)

// TestPages_ShowInvisibleCharacters (adv23 D4): a document name holding a
// right-to-left override, a zero-width space and a left-to-right isolate
// ("rtl/\u202egnp.exe\u200b\u2066doc.gram") was shown by the browser as
// "rtl/doc.gramexe.png". Every page, and the payload fragment, shows such
// characters as their code points; links keep the name itself
// (percent-encoded), so that they still open the document.
func TestPages_ShowInvisibleCharacters(t *testing.T) {
	doc := "rtl/\u202egnp.exe\u200b\u2066doc.gram"
	hs, f := noResponseStore(t, doc)
	c := client(t)
	shown := "rtl/&lt;U+202E&gt;gnp.exe&lt;U+200B&gt;&lt;U+2066&gt;doc.gram"
	for _, path := range []string{"/", "/findings/" + f.ID(), "/documents/?name=" + url.QueryEscape(doc), "/calls/c_0000000000000000000a", "/calls/c_0000000000000000000a?fragment=1"} {
		_, page := body(t, c, "GET", hs.URL+path, nil)
		if i := strings.IndexFunc(page, hidden); i >= 0 {
			t.Errorf("%s: the page holds U+%04X at byte %d: %q", path, page[i:][0], i, page[max(0, i-40):min(len(page), i+40)])
		}
		if !strings.Contains(page, shown) {
			t.Errorf("%s: the name is not shown as %s", path, shown)
		}
	}
	_, page := body(t, c, "GET", hs.URL+"/", nil)
	if !strings.Contains(page, url.PathEscape(doc)) && !strings.Contains(page, url.QueryEscape(doc)) {
		t.Errorf("the findings list's link does not carry the name percent-encoded")
	}
}

func TestVisible(t *testing.T) {
	for in, want := range map[string]string{
		"plain\n\ttext é…":   "plain\n\ttext é…",
		"a\u200bb":           "a&lt;U+200B&gt;b",
		"\u202e\u0007\ufeff": "&lt;U+202E&gt;&lt;U+0007&gt;&lt;U+FEFF&gt;",
		"\U000e0041":         "&lt;U+E0041&gt;",
	} {
		if got := visible(in); got != want {
			t.Errorf("visible(%q) = %q, want %q", in, got, want)
		}
	}
}
