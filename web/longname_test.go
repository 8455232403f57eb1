package web

import (
	"html"
	"net/url"
	"strings"
	"testing"
)

// TestLists_CutLongNames (op20's D5): a list shows a long document name
// cut, with the full name as the link's title, where it showed a
// 2,200-byte name in full in its cell and in the summary (a screen per
// row, op20's shots/04-index-long.png) while it cut sessions at 14
// characters; the finding's and the document's pages show it in full.
func TestLists_CutLongNames(t *testing.T) {
	doc := "inc/" + strings.Repeat("nuit é <b>x</b> ", 140) + ".gram"
	if len(doc) < 2200 {
		t.Fatalf("the name is %d bytes", len(doc))
	}
	hs, f := noResponseStore(t, doc)
	c := client(t)
	full := html.EscapeString(doc)
	_, page := body(t, c, "GET", hs.URL+"/", nil)
	if strings.Contains(page, ">"+full) || strings.Count(page, full) != 1 {
		t.Errorf("the findings list shows the %d-byte name in full %d times outside its title (want it once, as the title)", len(doc), strings.Count(page, full)-1)
	}
	if !strings.Contains(page, `title="`+full+`">`+html.EscapeString(short(doc, nameShown))+`</a>`) {
		t.Errorf("the findings list does not show the name cut with the full name as its title")
	}
	if !strings.Contains(page, `title="op20-s-long-name-session">op20-s-long-n…</a>`) {
		t.Errorf("the findings list's cut session has no title with its full name")
	}
	for _, path := range []string{"/findings/" + f.ID(), "/documents/?name=" + url.QueryEscape(doc)} {
		if _, page := body(t, c, "GET", hs.URL+path, nil); !strings.Contains(page, ">"+full+"<") {
			t.Errorf("%s does not show the full name", path)
		}
	}
}
