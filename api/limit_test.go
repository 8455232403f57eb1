package api_test

import (
	"testing"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestLists_LimitClamped: every listing takes a limit past its maximum as
// that maximum (not refused) and says so in the Mcpaudit-Limit-Clamped
// header, with the maximum; a limit within it gets no header. Before
// debt52 the page was cut without a word.
func TestLists_LimitClamped(t *testing.T) {
	hs, _ := newCallServer(t)
	f := func(path, want string) {
		t.Helper()
		status, h, body := do(t, "GET", hs.URL+path, "tok-oncall")
		if status != 200 {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		if got := h.Get(api.LimitHeader); got != want {
			t.Errorf("GET %s: %s %q, want %q", path, api.LimitHeader, got, want)
		}
	}
	for _, list := range []string{"/api/v1/calls", "/api/v1/findings", "/api/v1/writes"} {
		f(list+"?limit=1000000", "1000")
		f(list+"?limit=1000", "")
		f(list, "")
	}
	f("/api/v1/documents/timeline?name=a.gram&limit=1000000", "10000")
	f("/api/v1/documents/timeline?name=a.gram&limit=10000", "")
}
