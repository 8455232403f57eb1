package web

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestPage_OtherStore: after a switch to ClickHouse the data dir's
// embedded store still holds its history, which serve neither reads nor
// copies; mcpaudit status says so, and the page now says it too, to a
// reader of every tenant (the count is of every tenant's calls), and not
// to a reader of one tenant (op23a left it off the page).
func TestPage_OtherStore(t *testing.T) {
	wall := time.Date(2026, 12, 6, 22, 0, 0, 0, time.UTC)
	e := detect.NewEngine(detect.NewDefaultConfig())
	other := &api.OtherStore{Store: "sqlite", Path: "/var/lib/mcpaudit/mcpaudit.db", Calls: 1234, Findings: 56}
	hs, _ := engineStatusPage(t, e, &wall, func(q *api.Server) {
		q.OtherStore = other
		q.Credentials = map[string]api.Credential{"alice": {Token: "tok-alice", Tenant: "acme"}, "oncall": {Token: "tok-oncall", Tenant: "*"}}
	})
	want, ok := api.OtherStoreLine(api.StatusResponse{OtherStore: other})
	if !ok || !strings.Contains(want, "1234 calls and 56 findings") {
		t.Fatalf("OtherStoreLine = %q, %v", want, ok)
	}
	for _, tc := range []struct {
		token string
		shown bool
	}{{"tok-oncall", true}, {"tok-alice", false}} {
		c := client(t)
		if code, _ := body(t, c, "POST", hs.URL+"/login", url.Values{"token": {tc.token}, "next": {"/"}}); code != 200 {
			t.Fatalf("signing in with %s: %d", tc.token, code)
		}
		for _, path := range []string{"/", "/slo"} {
			_, page := body(t, c, "GET", hs.URL+path, nil)
			got := strings.Contains(page, `<p id="other-store">`) && strings.Contains(page, "1234 calls and 56 findings")
			if got != tc.shown {
				t.Errorf("%s, page %s: the other store's line shown %v, want %v", tc.token, path, got, tc.shown)
			}
		}
	}
	if _, ok := api.OtherStoreLine(api.StatusResponse{}); ok {
		t.Error("OtherStoreLine has a line without another store")
	}
}
