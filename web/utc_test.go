package web

import (
	"strings"
	"testing"
)

// TestPageTimesSayUTC: every view that lists times says they are UTC in
// the header of their column (an operator asking what happened at 14:02
// local time must not have to guess), and the list's time filters say
// which form and zone they take, as the timeline's do.
func TestPageTimesSayUTC(t *testing.T) {
	hs, fs := tenantServer(t)
	c := client(t)
	if code, _ := body(t, c, "POST", hs.URL+"/login", map[string][]string{"token": {"tok-alice"}}); code >= 400 {
		t.Fatalf("login: %d", code)
	}
	f := fs["acme"]
	for _, path := range []string{"/", "/documents/acme%2Fnotes.gram", "/sessions/s-acme", "/findings/" + f.ID(), "/calls/" + f.Calls[0]} {
		code, page := body(t, c, "GET", hs.URL+path, nil)
		if code != 200 {
			t.Fatalf("%s: %d", path, code)
		}
		if !strings.Contains(page, "<th>time (UTC)</th>") {
			t.Errorf("%s: no time column or field headed \"time (UTC)\"", path)
		}
	}
	_, page := body(t, c, "GET", hs.URL+"/", nil)
	if !strings.Contains(page, `placeholder="2026-12-04 14:02 (UTC) or 24h"`) {
		t.Errorf("the findings list's since filter does not say the form and zone it takes")
	}
}
