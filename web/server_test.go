package web

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

var t0 = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

// tempStore is an embedded store in a temporary directory, closed when
// the test ends.
func tempStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// tenantServer is the page over a real embedded store with one call and
// one finding for each of acme and globex, tokens for both, and redaction
// of "text".
func tenantServer(t *testing.T) (*httptest.Server, map[string]audit.Finding) {
	t.Helper()
	st := tempStore(t)
	ctx := context.Background()
	fs := map[string]audit.Finding{}
	for i, tenant := range []string{"acme", "globex"} {
		id := []string{"c_00000000000000000001", "c_00000000000000000002"}[i]
		doc := tenant + "/notes.gram"
		c := &audit.Call{ID: id, Time: t0.Add(time.Duration(i) * time.Second), Server: "thegram", Tenant: tenant,
			Session: "s-" + tenant, Tool: "gram_patch", Method: "tools/call", Responded: true,
			Arguments: []byte(`{"path":"` + doc + `","base_revision":3,"operations":[{"op":"append_block","text":"secret ` + tenant + `"}]}`),
			Result:    []byte(`{"isError":false,"structuredContent":{"path":"` + doc + `","rev":4,"hash":"abcd"}}`)}
		rec := audit.Record{Call: c, Outcome: audit.OutcomeOK, Tool: c.Tool,
			Ops: []audit.Op{{Tool: c.Tool, Kind: audit.OpWrite, Target: doc, Status: audit.OpSucceeded}}}
		if _, err := st.AppendCalls(ctx, []audit.Record{rec}); err != nil {
			t.Fatal(err)
		}
		f := audit.Finding{Kind: audit.KindDoubleAppliedWrite, Severity: audit.SeverityCritical, Server: "thegram", Tenant: tenant,
			Document: doc, Session: c.Session, Time: c.Time, Calls: []string{id}, Summary: "twice on " + doc}
		fs[tenant] = f
		if err := st.Commit(ctx, audit.Results{Findings: []audit.Finding{f}}); err != nil {
			t.Fatal(err)
		}
	}
	q := api.New(st, 0.999)
	q.Credentials = map[string]api.Credential{"alice": {Token: "tok-alice", Tenant: "acme"}, "gary": {Token: "tok-gary", Tenant: "globex"}}
	p, err := New(st, q, Config{Redact: []string{"text"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	return hs, fs
}

func client(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar}
}

func body(t *testing.T, c *http.Client, method, u string, form url.Values) (int, string) {
	t.Helper()
	var resp *http.Response
	var err error
	if method == "POST" {
		resp, err = c.PostForm(u, form)
	} else {
		resp, err = c.Get(u)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestPageTenants(t *testing.T) {
	hs, fs := tenantServer(t)
	acme, globex := fs["acme"], fs["globex"]

	t.Run("no credential: sent to sign in", func(t *testing.T) {
		c := client(t)
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := c.Get(hs.URL + "/documents/acme%2Fnotes.gram")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/login?next=") {
			t.Fatalf("without a token: %d to %q, want a redirect to /login", resp.StatusCode, loc)
		}
	})
	c := client(t)
	if code, _ := body(t, c, "POST", hs.URL+"/login", url.Values{"token": {"tok-wrong"}}); code != http.StatusUnauthorized {
		t.Fatalf("a wrong token signs in: %d", code)
	}
	if code, page := body(t, c, "POST", hs.URL+"/login", url.Values{"token": {"tok-alice"}, "next": {"/"}}); code != 200 || !strings.Contains(page, "alice") {
		t.Fatalf("signing in: %d", code)
	}
	t.Run("a tenant sees only its own", func(t *testing.T) {
		_, page := body(t, c, "GET", hs.URL+"/", nil)
		if !strings.Contains(page, acme.ID()) || strings.Contains(page, globex.ID()) {
			t.Errorf("alice's / lists globex's finding or misses acme's")
		}
		for _, u := range []string{"/findings/" + globex.ID(), "/calls/" + globex.Calls[0]} {
			if code, _ := body(t, c, "GET", hs.URL+u, nil); code != http.StatusNotFound {
				t.Errorf("alice GET %s: %d, want 404", u, code)
			}
		}
		if _, page := body(t, c, "GET", hs.URL+"/documents/globex%2Fnotes.gram", nil); strings.Contains(page, globex.Calls[0]) {
			t.Error("alice sees globex's calls on its document's timeline")
		}
	})
	t.Run("payloads are redacted", func(t *testing.T) {
		code, frag := body(t, c, "GET", hs.URL+"/calls/"+acme.Calls[0]+"?fragment=1", nil)
		if code != 200 || strings.Contains(frag, "secret acme") || !strings.Contains(frag, Redacted) || !strings.Contains(frag, "base_revision") {
			t.Errorf("payload fragment (%d): %s", code, frag)
		}
	})
	t.Run("a call without a client says so", func(t *testing.T) {
		code, page := body(t, c, "GET", hs.URL+"/calls/"+acme.Calls[0], nil)
		if code != 200 || !strings.Contains(page, ">s-acme</a> / —</td>") {
			t.Errorf("the call's session / client cell (%d) does not show the session and — for the unknown client:\n%s", code, page)
		}
	})
	t.Run("the ack form needs the page's token and records the credential", func(t *testing.T) {
		if code, _ := body(t, c, "POST", hs.URL+"/findings/"+acme.ID()+"/ack", url.Values{"note": {"forged"}}); code != http.StatusForbidden {
			t.Errorf("an ack without the form token: %d, want 403", code)
		}
		_, page := body(t, c, "GET", hs.URL+"/findings/"+acme.ID(), nil)
		m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatal("no form token on the finding's page")
		}
		code, page := body(t, c, "POST", hs.URL+"/findings/"+acme.ID()+"/ack", url.Values{"note": {"on it"}, "csrf": {m[1]}, "by": {"mallory"}})
		if code != 200 || !regexp.MustCompile(`id="state"[^>]*>acknowledged by alice`).MatchString(page) {
			t.Errorf("after the ack (%d) the state reads %q", code, regexp.MustCompile(`id="state"[^>]*>[^<]*`).FindString(page))
		}
		if code, _ := body(t, c, "POST", hs.URL+"/findings/"+globex.ID()+"/ack", url.Values{"csrf": {m[1]}}); code != http.StatusNotFound {
			t.Errorf("alice acking globex's finding: %d, want 404", code)
		}
	})
	t.Run("the other tenant", func(t *testing.T) {
		g := client(t)
		body(t, g, "POST", hs.URL+"/login", url.Values{"token": {"tok-gary"}})
		_, page := body(t, g, "GET", hs.URL+"/", nil)
		if strings.Contains(page, acme.ID()) || !strings.Contains(page, globex.ID()) {
			t.Error("gary's / is not globex's")
		}
	})
	t.Run("bad parameters are named", func(t *testing.T) {
		code, page := body(t, c, "GET", hs.URL+"/?kind=nonsense", nil)
		if code != http.StatusBadRequest || !strings.Contains(page, "kind") {
			t.Errorf("/?kind=nonsense: %d", code)
		}
		code, page = body(t, c, "GET", hs.URL+"/documents/a.gram?since=yesterday", nil)
		if code != http.StatusBadRequest || !strings.Contains(page, "since") {
			t.Errorf("since=yesterday: %d", code)
		}
		// since and until swapped: an empty range, refused as the query
		// API refuses it, not shown as "No findings match".
		for _, u := range []string{"/", "/documents/acme%2Fnotes.gram", "/sessions/s-acme"} {
			code, page = body(t, c, "GET", hs.URL+u+"?since=2026-12-05&until=2026-12-01", nil)
			if code != http.StatusBadRequest || !strings.Contains(page, "is before since") {
				t.Errorf("%s with until before since: %d, want 400 saying the range is empty", u, code)
			}
		}
	})
}

// TestLoginNextStaysLocal: signing in goes on to the page asked for, and
// never to another site: a browser takes "/\evil" and "/<tab>/evil" for
// "//evil".
func TestLoginNextStaysLocal(t *testing.T) {
	hs, _ := tenantServer(t)
	for next, want := range map[string]string{
		"/documents/a%2Fb?since=1h": "/documents/a%2Fb?since=1h",
		"//evil.example":            "/",
		"https://evil.example/":     "/",
		`/\evil.example`:            "/",
		`/\/evil.example`:           "/",
		"/\t/evil.example":          "/",
		"/\r\n/evil.example":        "/",
		"javascript:alert(1)":       "/",
	} {
		c := client(t)
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := c.PostForm(hs.URL+"/login", url.Values{"token": {"tok-alice"}, "next": {next}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != want {
			t.Errorf("next %q: %d to %q, want a redirect to %q", next, resp.StatusCode, loc, want)
		}
	}
}
