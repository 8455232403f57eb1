package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// routeDocs are where an HTTP route may be documented: the query API and
// the collector's endpoints, the page, and the relays and the demo server.
var routeDocs = []string{"api.md", "web.md", "proxy.md"}

// route is a pattern registered on an http.ServeMux, where the code
// registers it.
type route struct {
	pattern string // as registered: "GET /api/v1/findings/{id}"
	where   string // file:line
}

// routes returns every pattern given as a string literal to a Handle or
// HandleFunc call in the module's non-test Go files.
func routes(t *testing.T, root string) []route {
	t.Helper()
	var out []route
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			p, err := strconv.Unquote(lit.Value)
			if err != nil || !strings.Contains(p, "/") {
				return true
			}
			rel, _ := filepath.Rel(root, path)
			out = append(out, route{p, rel + ":" + strconv.Itoa(fset.Position(lit.Pos()).Line)})
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// docPattern returns the expression that finds a route's path in the
// docs: at the start of a code span or of a heading's text, alone, after a
// method ("`POST /login`", "## GET /api/v1/writes") or after a host
// ("`http://ADDR/mcp`"), and ending the path there (a query or fragment
// may follow). A wildcard segment matches any name in
// braces or a literal value ("ack|resolve|reopen"); a pattern ending in
// "/" is a prefix and matches any continuation, but not one ending in
// "{$}", which is exact.
func docPattern(pattern string) *regexp.Regexp {
	path := pattern
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		path = pattern[i+1:]
	}
	path, exact := strings.CutSuffix(path, "{$}")
	var b strings.Builder
	b.WriteString("(?m)(?:`|^#+ )(?:[A-Z]+ |[a-z]+://[^`/ ]*)?")
	for i, part := range regexp.MustCompile(`\{[^}]*\}`).Split(path, -1) {
		if i > 0 {
			b.WriteString(`(?:\{[^}` + "`" + `]+\}|[A-Za-z0-9_.|-]+)`)
		}
		b.WriteString(regexp.QuoteMeta(part))
	}
	if !strings.HasSuffix(path, "/") || exact {
		// The path ends here: what follows is not part of a path.
		b.WriteString(`(?:[^A-Za-z0-9_./{}-]|$)`)
	}
	return regexp.MustCompile(b.String())
}

// TestRoutesDocumented: every route the code registers on an HTTP mux (the
// query API, ingest, /metrics and the health checks, the page, pprof, the
// relays' /metrics, the demo server) is named in docs/api.md, docs/web.md
// or docs/proxy.md, so that an endpoint is never added unsaid.
func TestRoutesDocumented(t *testing.T) {
	var docs strings.Builder
	for _, name := range routeDocs {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	rs := routes(t, "..")
	if len(rs) < 20 {
		// The walk must see the muxes of api, web, the receiver and serve.
		t.Fatalf("found %d routes, want the 20 and more of api, web, receiver and serve: %v", len(rs), rs)
	}
	for _, r := range rs {
		if !docPattern(r.pattern).MatchString(docs.String()) {
			t.Errorf("%s: route %q is in none of %v", r.where, r.pattern, routeDocs)
		}
	}
}

// TestDocPattern: what counts as documenting a route.
func TestDocPattern(t *testing.T) {
	f := func(pattern, doc string, want bool) {
		t.Helper()
		if got := docPattern(pattern).MatchString(doc); got != want {
			t.Errorf("%q in %q: %v, want %v", pattern, doc, got, want)
		}
	}
	f("GET /slo", "the page's `/slo` view", true)
	f("GET /slo", "`/slo?server=...`", true)
	f("GET /slo", "`GET /api/v1/slo`", false) // another route
	f("GET /slo", "`/slow`", false)
	f("GET /{$}", "`/` on the API listener", true)
	f("GET /{$}", "`/slo`", false)
	f("GET /assets/", "`/assets/app.css`", true)
	f("GET /calls/{id}", "`/calls/{id}`", true)
	f("GET /api/v1/calls/{id}", "## GET /api/v1/calls/{id}\n", true)
	f("GET /api/v1/calls/{id}", "see GET /api/v1/calls/{id}", false)
	f("GET /calls/{id}", "`GET /api/v1/calls/{id}`", false)
	f("POST /findings/{id}/{action}", "`POST /findings/{id}/ack|resolve|reopen`", true)
	f("GET /documents/{doc...}", "`/documents/{document}`", true)
	f("GET /api/v1/documents/", "`GET /api/v1/documents/{document}/timeline`", true)
	f("/mcp", "at `http://ADDR/mcp` or", true)
	f("GET /login", "`POST /login`", true)
	f("GET /login", "`/login-page`", false)
	f("/debug/pprof/", "`/debug/pprof/` on the API listener", true)
	f("/debug/pprof/profile", "`/debug/pprof/`", false)
	if !slices.Contains(routeDocs, "api.md") {
		t.Fatal("api.md is not among the docs searched")
	}
}
