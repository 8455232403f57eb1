package web

import (
	"context"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

// everyTenantServer is the page over a real embedded store where tenants
// acme and globex each hold a document of one name (a hostile one), a
// session of one name and the same exchange (one call id, stored for
// each), each with a finding on it; credentials for acme and for every
// tenant.
func everyTenantServer(t *testing.T) (*httptest.Server, string, map[string]*audit.Finding) {
	t.Helper()
	st := tempStore(t)
	ctx := context.Background()
	const doc = `ops/"><b>x</b>.gram`
	const id = "c_00000000000000000007"
	fs := map[string]*audit.Finding{}
	for i, tenant := range []string{"acme", "globex"} {
		c := &audit.Call{ID: id, Time: t0.Add(time.Duration(i) * time.Second), Server: "thegram", Tenant: tenant,
			Session: "s-1", Tool: "gram_patch", Method: "tools/call", Responded: true,
			Arguments: []byte(`{"path":"ops/x.gram","base_revision":3,"operations":[{"op":"append_block","text":"of ` + tenant + `"}]}`),
			Result:    []byte(`{"isError":false,"structuredContent":{"rev":4,"hash":"abcd"}}`)}
		rec := audit.Record{Call: c, Outcome: audit.OutcomeOK, Tool: c.Tool,
			Ops: []audit.Op{{Tool: c.Tool, Kind: audit.OpWrite, Target: doc, Status: audit.OpSucceeded}}}
		if _, err := st.AppendCalls(ctx, []audit.Record{rec}); err != nil {
			t.Fatal(err)
		}
		f := audit.Finding{Kind: audit.KindDoubleAppliedWrite, Severity: audit.SeverityCritical, Server: "thegram", Tenant: tenant,
			Document: doc, Session: c.Session, Time: c.Time, Calls: []string{id}, Summary: "twice on " + doc}
		fs[tenant] = &f
		if err := st.Commit(ctx, audit.Results{Findings: []audit.Finding{f}}); err != nil {
			t.Fatal(err)
		}
	}
	q := api.New(st, 0.999)
	q.Credentials = map[string]api.Credential{"alice": {Token: "tok-alice", Tenant: "acme"}, "oncall": {Token: "tok-oncall", Tenant: "*"}}
	p, err := New(st, q, Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	return hs, doc, fs
}

// cells returns the text of the cells of class c, in order.
func cells(page, c string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<td class="`+c+`"[^>]*>([^<]*)</td>`).FindAllStringSubmatch(page, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestPage_EveryTenant: a credential of every tenant ("*") is shown the
// tenant of each row of the findings list and of a timeline, is offered
// the tenant filter, and follows a row's links to that tenant's document,
// session and call (tenant=), which then list only its rows; a finding's
// evidence is its tenant's call, not both copies of the exchange. A
// credential of one tenant sees no tenant column and no filter (op21's
// D4: two tenants' documents of one name could not be told apart).
func TestPage_EveryTenant(t *testing.T) {
	hs, doc, fs := everyTenantServer(t)
	oncall := client(t)
	body(t, oncall, "POST", hs.URL+"/login", url.Values{"token": {"tok-oncall"}})

	_, page := body(t, oncall, "GET", hs.URL+"/", nil)
	if got := cells(page, "tenant"); strings.Join(got, ",") != "globex,acme" {
		t.Errorf("the findings list's tenant cells are %q, want globex then acme (newest first)", got)
	}
	if !strings.Contains(page, `<input name="tenant"`) {
		t.Error("the findings list offers no tenant filter to a reader of every tenant")
	}
	docLink := "/documents/" + url.PathEscape(doc) + "?tenant=globex"
	if !strings.Contains(page, `href="`+strings.ReplaceAll(docLink, "&", "&amp;")+`"`) && !strings.Contains(page, `href="`+docLink+`"`) {
		t.Errorf("no link to globex's document %s in the list", docLink)
	}
	if strings.Contains(page, "<b>x</b>") {
		t.Error("a document name is not escaped")
	}

	_, page = body(t, oncall, "GET", hs.URL+"/?tenant=acme", nil)
	if strings.Contains(page, fs["globex"].ID()) || !strings.Contains(page, fs["acme"].ID()) || len(cells(page, "tenant")) != 0 {
		t.Errorf("/?tenant=acme does not list acme's finding alone without a tenant column")
	}

	_, page = body(t, oncall, "GET", hs.URL+"/documents/"+url.PathEscape(doc), nil)
	if got := cells(page, "tenant"); len(got) != 4 {
		t.Errorf("the document's timeline of every tenant has tenant cells %q, want its 2 findings and 2 calls", got)
	}
	_, page = body(t, oncall, "GET", hs.URL+docLink, nil)
	if n := strings.Count(page, `<tr class="call`); n != 1 || !strings.Contains(page, `id="tenant">of tenant globex`) ||
		!strings.Contains(page, `<input type="hidden" name="tenant" value="globex">`) || !strings.Contains(page, "/calls/c_00000000000000000007?tenant=globex") {
		t.Errorf("globex's document: %d calls, want 1, named as globex's, its range form and call link keeping the tenant", n)
	}

	_, page = body(t, oncall, "GET", hs.URL+"/findings/"+fs["globex"].ID(), nil)
	if n := strings.Count(page, `class="call evidence`); n != 1 || !strings.Contains(page, "/calls/c_00000000000000000007?tenant=globex") {
		t.Errorf("globex's finding shows %d evidence rows, want its one call, linked as globex's", n)
	}
	_, page = body(t, oncall, "GET", hs.URL+"/calls/c_00000000000000000007?tenant=globex", nil)
	if !strings.Contains(page, `<td id="call-tenant">globex</td>`) || !strings.Contains(page, "of globex") {
		t.Error("globex's call page does not name its tenant or shows another tenant's payload")
	}

	alice := client(t)
	body(t, alice, "POST", hs.URL+"/login", url.Values{"token": {"tok-alice"}})
	for _, u := range []string{"/", "/documents/" + url.PathEscape(doc), "/findings/" + fs["acme"].ID(), "/calls/c_00000000000000000007"} {
		_, page := body(t, alice, "GET", hs.URL+u, nil)
		if len(cells(page, "tenant")) != 0 || strings.Contains(page, `name="tenant"`) || strings.Contains(page, "tenant=") || strings.Contains(page, "call-tenant") {
			t.Errorf("alice (one tenant) is shown a tenant column, filter or link on %s", u)
		}
	}
}
