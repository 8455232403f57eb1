package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/access"
)

// TestPageScope: a known credential without the query scope is told so
// with 403, whether it comes as a bearer token, as the cookie of an
// earlier sign-in (its scope since taken away in the tokens file) or to
// the sign-in form; it is not sent to /login, where it would loop. No
// credential is still sent to /login.
func TestPageScope(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	a, err := access.New(access.Config{}, []access.Entry{
		{Name: "agents-acme", Tenant: "acme", Scopes: access.ScopeIngest, Hash: access.HashToken("tok-ingest")},
		{Name: "oncall", Tenant: "acme", Scopes: access.ScopeQuery, Hash: access.HashToken("tok-query")},
	})
	if err != nil {
		t.Fatal(err)
	}
	q := api.New(st, 0.999)
	q.Access = a
	p, err := New(st, q, Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	noRedirect := func(c *http.Client) *http.Client {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		return c
	}
	get := func(c *http.Client, path, bearer string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", hs.URL+path, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Location"), string(b)
	}
	const says = "credential agents-acme may not read (no query scope; it has: ingest)"
	withCookie := func(tok string) *http.Client {
		c := noRedirect(client(t))
		u, _ := url.Parse(hs.URL)
		c.Jar.SetCookies(u, []*http.Cookie{{Name: tokenCookie, Value: tok, Path: "/"}})
		return c
	}

	for _, path := range []string{"/", "/slo", "/documents/acme%2Fa.gram"} {
		if code, loc, page := get(noRedirect(client(t)), path, "tok-ingest"); code != http.StatusForbidden || loc != "" || !strings.Contains(page, says) {
			t.Errorf("%s with an ingest bearer token: %d to %q, want 403 saying %q:\n%s", path, code, loc, says, page)
		}
		if code, loc, page := get(withCookie("tok-ingest"), path, ""); code != http.StatusForbidden || loc != "" || !strings.Contains(page, says) {
			t.Errorf("%s signed in with an ingest token: %d to %q, want 403 saying %q:\n%s", path, code, loc, says, page)
		}
		if code, loc, _ := get(noRedirect(client(t)), path, ""); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/login?next=") {
			t.Errorf("%s without a credential: %d to %q, want a redirect to /login", path, code, loc)
		}
		// A bearer token without the scope does not hide a signed-in
		// credential that has it.
		if code, _, _ := get(withCookie("tok-query"), path, "tok-ingest"); code == http.StatusForbidden || code == http.StatusSeeOther {
			t.Errorf("%s with an ingest bearer token and a query cookie: %d, want the page", path, code)
		}
	}
	c := noRedirect(client(t))
	if code, page := body(t, c, "POST", hs.URL+"/login", url.Values{"token": {"tok-ingest"}, "next": {"/"}}); code != http.StatusForbidden || !strings.Contains(page, says) {
		t.Errorf("signing in with an ingest token: %d, want 403 saying %q:\n%s", code, says, page)
	}
	u, _ := url.Parse(hs.URL)
	if cs := c.Jar.Cookies(u); len(cs) != 0 {
		t.Errorf("signing in with an ingest token set cookies %v", cs)
	}
	if code, _ := body(t, c, "POST", hs.URL+"/login", url.Values{"token": {"tok-wrong"}}); code != http.StatusUnauthorized {
		t.Errorf("signing in with an unknown token: %d, want 401", code)
	}
}
