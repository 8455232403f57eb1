package web

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// oddNames are session and document names a page path could lose: the dot
// segments (a browser resolves "." and ".." before it sends, %2E
// included), names that would be dot segments or be cleaned by the router
// if their slashes were not escaped ("a/..", "a//b", "/a", "a/."), names
// that only look escaped, and a plain one.
var oddNames = []string{".", "..", "a/..", "a/.", "a//b", "/a", "%2E", "%2e%2E", "plain"}

// oddName is what the test stored under one name: the calls of the session
// named so and of the document named so, oldest first, and a finding on
// each, dated by its first call.
type oddName struct {
	sessionCalls, docCalls []string
	sessionFinding         audit.Finding
	docFinding             audit.Finding
}

// oddNameServer is the page over a real embedded store holding, for each
// of oddNames, three calls in the session of that name (on another
// document) and three on the document of that name (in another session),
// and a finding on each, with pages of two calls.
func oddNameServer(t *testing.T) (*httptest.Server, map[string]*oddName) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	out := map[string]*oddName{}
	n := 0
	add := func(session, doc string, at time.Time) string {
		n++
		id := fmt.Sprintf("c_%020d", n)
		c := &audit.Call{ID: id, Time: at, Server: "thegram", Session: session, Tool: "gram_patch", Method: "tools/call", Responded: true,
			Arguments: []byte(`{"path":"x","base_revision":3}`), Result: []byte(`{"isError":false}`)}
		rec := audit.Record{Call: c, Outcome: audit.OutcomeOK, Tool: c.Tool,
			Ops: []audit.Op{{Tool: c.Tool, Kind: audit.OpWrite, Target: doc, Status: audit.OpSucceeded}}}
		if _, err := st.AppendCalls(ctx, []audit.Record{rec}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	for i, name := range oddNames {
		o := &oddName{}
		base := t0.Add(time.Duration(i) * time.Hour)
		for j := range 3 {
			o.sessionCalls = append(o.sessionCalls, add(name, fmt.Sprintf("other-doc-%d", i), base.Add(time.Duration(j)*time.Minute)))
			o.docCalls = append(o.docCalls, add(fmt.Sprintf("other-session-%d", i), name, base.Add(time.Duration(10+j)*time.Minute)))
		}
		o.sessionFinding = audit.Finding{Kind: audit.KindDoubleAppliedWrite, Severity: audit.SeverityCritical, Server: "thegram",
			Document: fmt.Sprintf("other-doc-%d", i), Session: name, Time: base, Calls: o.sessionCalls[:1], Summary: "session finding"}
		o.docFinding = audit.Finding{Kind: audit.KindDoubleAppliedWrite, Severity: audit.SeverityCritical, Server: "thegram",
			Document: name, Session: fmt.Sprintf("other-session-%d", i), Time: base.Add(10 * time.Minute), Calls: o.docCalls[:1], Summary: "document finding"}
		if err := st.Commit(ctx, audit.Results{Findings: []audit.Finding{o.sessionFinding, o.docFinding}}); err != nil {
			t.Fatal(err)
		}
		out[name] = o
	}
	p, err := New(st, api.New(st, 0.999), Config{PageSize: 2}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	return hs, out
}

// browserDots matches the escaped dot a browser takes for "." in a dot
// segment (the URL standard's "%2e", any case).
var browserDots = regexp.MustCompile(`(?i)%2e`)

// resolve is where a browser on page base goes for href as it stands in
// the HTML: unescaped, dot segments resolved (ResolveReference follows
// RFC 3986; %2E is decoded first, as the URL standard treats it as a dot).
func resolve(t *testing.T, base *url.URL, href string) *url.URL {
	t.Helper()
	href = html.UnescapeString(href)
	p, q, hasQuery := strings.Cut(href, "?")
	if hasQuery {
		q = "?" + q
	}
	ref, err := url.Parse(browserDots.ReplaceAllString(p, ".") + q)
	if err != nil {
		t.Fatalf("link %q: %v", href, err)
	}
	return base.ResolveReference(ref)
}

// visit GETs u, following redirects, and returns the page and where it
// ended.
func visit(t *testing.T, u *url.URL) (*url.URL, int, string) {
	t.Helper()
	resp, err := client(t).Get(u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Request.URL, resp.StatusCode, string(b)
}

// href returns the target of the first link the expression finds (its
// first group), failing the test when there is none.
func href(t *testing.T, page, where, expr string) string {
	t.Helper()
	m := regexp.MustCompile(expr).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no %s link (%s) on the page:\n%s", where, expr, page)
	}
	return m[1]
}

// TestOddNamesLinks follows, as a browser resolves them, the links to and
// on the timeline of a session or document named ".", "..", "a/.." and so
// on: each must land on that name's page and show its calls, and the
// page's paging, range form and "show every time" links must stay on it.
func TestOddNamesLinks(t *testing.T) {
	hs, names := oddNameServer(t)
	root, _ := url.Parse(hs.URL + "/")
	for _, name := range oddNames {
		o := names[name]
		for _, kind := range []string{"session", "document"} {
			t.Run(kind+"_"+url.PathEscape(name), func(t *testing.T) {
				want, f, label := o.sessionCalls, o.sessionFinding, "Session"
				if kind == "document" {
					want, f, label = o.docCalls, o.docFinding, "Document"
				}
				// check that the page at u is the timeline of the name and
				// shows the calls want.
				check := func(step string, u *url.URL, want []string) string {
					t.Helper()
					at, code, page := visit(t, u)
					// The finding's links name its server (the page then
					// says "on server thegram" in its title).
					h1 := label + ` <span class="mono">` + html.EscapeString(name) + `</span>`
					if code != 200 || !strings.Contains(page, h1+`</h1>`) && !strings.Contains(page, h1+` <span class="muted" id="server">on server thegram</span></h1>`) {
						t.Fatalf("%s: %s (ended at %s) answered %d without %q:\n%s", step, u, at, code, h1, page)
					}
					if got := shownCalls(page); !slices.Equal(got, want) {
						t.Fatalf("%s: %s shows calls %v, want %v", step, u, got, want)
					}
					return page
				}

				// From the findings list filtered on the name.
				listURL := root.ResolveReference(&url.URL{Path: "/", RawQuery: url.Values{kind: {name}}.Encode()})
				_, code, list := visit(t, listURL)
				if code != 200 {
					t.Fatalf("%s: %d", listURL, code)
				}
				first := resolve(t, listURL, href(t, list, "timeline", `id="`+kind+`-timeline">[^<]*<a href="([^"]*)"`))
				page := check("the findings list's link", first, want[:2])

				// The next page.
				check("Later calls", resolve(t, first, href(t, page, "next", `id="next" href="([^"]*)"`)), want[2:])

				// The range form, submitted as a browser does: its action is
				// the page, its fields replace the query.
				form := href(t, page, "range form", `(?s)(<form class="filters" method="get">.*?</form>)`)
				fields := url.Values{}
				for _, m := range regexp.MustCompile(`<input (?:type="hidden" )?name="([^"]*)" value="([^"]*)"`).FindAllStringSubmatch(form, -1) {
					fields.Add(m[1], html.UnescapeString(m[2]))
				}
				fields.Set("since", f.Time.Add(time.Second).Format(time.RFC3339))
				ranged := *first
				ranged.RawQuery = fields.Encode()
				rangedPage := check("the range form", &ranged, want[1:])
				if !strings.Contains(rangedPage, `id="findings-outside"`) {
					t.Fatalf("the range after the finding does not say a finding falls outside:\n%s", rangedPage)
				}
				check("show every time", resolve(t, &ranged, href(t, rangedPage, "show every time", `id="findings-outside">[^<]*<a href="([^"]*)"`)), want[:2])

				// From the finding's page and from a call's page.
				fu := resolve(t, first, "/findings/"+f.ID())
				_, code, fpage := visit(t, fu)
				if code != 200 {
					t.Fatalf("%s: %d", fu, code)
				}
				if kind == "document" {
					check("the finding's document link", resolve(t, fu, href(t, fpage, "document", `id="document-link" href="([^"]*)"`)), want[:2])
				} else {
					check("the finding's session link", resolve(t, fu, href(t, fpage, "session", `<tr><th>session</th><td><a href="([^"]*)"`)), want[:2])
				}
				cu := resolve(t, first, "/calls/"+want[0])
				_, code, cpage := visit(t, cu)
				if code != 200 {
					t.Fatalf("%s: %d", cu, code)
				}
				if kind == "document" {
					check("the call's document link", resolve(t, cu, href(t, cpage, "document", `<tr><th>documents</th><td><a href="([^"]*)"`)), want[:2])
				} else {
					check("the call's session link", resolve(t, cu, href(t, cpage, "session", `<tr><th>session / client</th><td><a href="([^"]*)"`)), want[:2])
				}
			})
		}
	}
}

// TestNameURL: a name keeps its path form unless it is a dot segment,
// which a browser would resolve away.
func TestNameURL(t *testing.T) {
	f := func(name, want string) {
		t.Helper()
		if got := nameURL("/sessions/", name); got != want {
			t.Errorf("nameURL(%q) = %q, want %q", name, got, want)
		}
	}
	f("s-1", "/sessions/s-1")
	f("team/notes.gram", "/sessions/team%2Fnotes.gram")
	f("%2E", "/sessions/%252E")
	f("a.", "/sessions/a.")
	f("...", "/sessions/...")
	f("a/", "/sessions/a%2F")
	f(".", "/sessions/?name=.")
	f("..", "/sessions/?name=..")
	f("a/..", "/sessions/a%2F..")
	f("./a", "/sessions/.%2Fa")
	f("a//b", "/sessions/a%2F%2Fb")
	f("/a", "/sessions/%2Fa")
	f(" .", "/sessions/%20.")
	f("", "/sessions/?name=")
}
