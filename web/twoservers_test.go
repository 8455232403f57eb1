package web

import (
	"context"
	"fmt"
	"html"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

// TestPage_TwoServers: servers thegram-otel and thegram-otelg (two
// exporters replaying one capture) each hold research/log-153acd.gram with
// a read, a patch applied twice and its finding, in a real embedded store.
// The document's page names each row's server and links to each server's
// document; narrowed with server= it lists that server's rows alone, says
// so, and keeps server= in its range form and its links; a finding's page
// links to its server's document; the findings list's links carry the
// row's server; /slo's top documents are a row per server with its name
// (op23's D2: the page and /slo showed 2 findings and 8 calls that read as
// duplicates, and added the two servers' bad writes into one row).
func TestPage_TwoServers(t *testing.T) {
	st := tempStore(t)
	ctx := context.Background()
	const doc = "research/log-153acd.gram"
	at0 := time.Date(2026, 12, 6, 17, 54, 31, 0, time.UTC)
	servers := []string{"thegram-otel", "thegram-otelg"}
	fs := map[string]*audit.Finding{}
	for i, server := range servers {
		at := at0.Add(time.Duration(i) * 10 * time.Millisecond)
		id := func(n int) string { return fmt.Sprintf("c_%020d", 10*i+n) }
		var recs []audit.Record
		for n, tool := range []string{"gram_read", "gram_patch"} {
			c := &audit.Call{ID: id(n + 1), Time: at.Add(time.Duration(n) * time.Second), Server: server, Session: "s-39c9", Tool: tool,
				Method: "tools/call", Responded: true, Arguments: []byte(`{"path":"` + doc + `"}`)}
			kind := audit.OpRead
			if n == 1 {
				kind = audit.OpWrite
			}
			recs = append(recs, audit.Record{Call: c, Outcome: audit.OutcomeOK, Tool: tool, Ops: []audit.Op{{Tool: tool, Kind: kind, Target: doc, Status: audit.OpSucceeded}}})
		}
		if _, err := st.AppendCalls(ctx, recs); err != nil {
			t.Fatal(err)
		}
		patch := recs[1].Call
		w := audit.Write{CallID: patch.ID, Time: patch.Time, Server: server, Session: patch.Session, Tool: patch.Tool, Document: doc,
			Key: "req-1", State: audit.StateDoubleApplied, StateTime: patch.Time}
		f := audit.Finding{Kind: audit.KindDoubleAppliedWrite, Severity: audit.SeverityCritical, Server: server, Document: doc,
			Session: patch.Session, Time: patch.Time, Calls: []string{patch.ID}, Summary: "twice on " + doc}
		fs[server] = &f
		if err := st.Commit(ctx, audit.Results{Writes: []audit.Write{w}, Findings: []audit.Finding{f}}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := New(st, api.New(st, 0.999), Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	defer hs.Close()
	c := client(t)
	get := func(u string) string {
		t.Helper()
		code, page := body(t, c, "GET", hs.URL+u, nil)
		if code != 200 {
			t.Fatalf("%s: %d\n%s", u, code, page)
		}
		return html.UnescapeString(page)
	}
	docPage := "/documents/" + url.PathEscape(doc)

	page := get(docPage)
	if got := cells(page, "server"); strings.Join(got, ",") != "thegram-otel,thegram-otelg,thegram-otel,thegram-otelg,thegram-otel,thegram-otelg" {
		t.Errorf("the document's page: server cells %q, want each of its 2 findings and 4 calls named", got)
	}
	if !strings.Contains(page, `id="many-servers">2 servers hold a document of this name`) ||
		!strings.Contains(page, `<a href="?server=thegram-otelg">thegram-otelg</a>`) {
		t.Errorf("the document's page does not say that 2 servers hold the name, with a link to each")
	}
	if !strings.Contains(page, `href="/sessions/s-39c9?server=thegram-otelg"`) {
		t.Errorf("a row's session link does not carry its server")
	}

	page = get(docPage + "?server=thegram-otelg")
	if got := shownCalls(page); strings.Join(got, ",") != "c_00000000000000000011,c_00000000000000000012" {
		t.Errorf("?server=thegram-otelg shows calls %v, want thegram-otelg's 2", got)
	}
	if !strings.Contains(page, `id="server">on server thegram-otelg`) || !strings.Contains(page, `<input type="hidden" name="server" value="thegram-otelg">`) ||
		!strings.Contains(page, `id="findings-count">(1)`) || len(cells(page, "server")) != 0 || !strings.Contains(page, `id="every-server" href="?"`) {
		t.Errorf("?server=thegram-otelg: not named as that server's, its range form without server=, not its 1 finding, a server column, or no way back")
	}

	page = get("/findings/" + fs["thegram-otelg"].ID())
	if m := regexp.MustCompile(`id="document-link" href="([^"]*)"`).FindStringSubmatch(page); m == nil || !strings.HasSuffix(m[1], "&server=thegram-otelg") {
		t.Errorf("the finding's document link %q does not open its server's document", m)
	}
	page = get("/")
	if !strings.Contains(page, `href="`+docPage+`?server=thegram-otel"`) || !strings.Contains(page, `href="`+docPage+`?server=thegram-otelg"`) {
		t.Errorf("the findings list's document links do not carry their row's server")
	}

	page = get("/slo?until=2026-12-07T00:00:00Z")
	m := regexp.MustCompile(`(?s)<table id="top-documents">(.*?)</table>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no top documents on /slo")
	}
	if got := cells(m[1], "server"); strings.Join(got, ",") != "thegram-otel,thegram-otelg" ||
		strings.Count(m[1], `<td class="n">1</td>`) != 2 || !strings.Contains(m[1], `href="`+docPage+`?server=thegram-otelg"`) {
		t.Errorf("/slo's top documents: %s\nwant a row per server, each with its 1 bad event and a link to its document", m[1])
	}
}
