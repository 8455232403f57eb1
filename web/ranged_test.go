package web

import (
	"context"
	"html"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

// TestListTimelineLinkKeepsRange: the findings list filtered by document (or
// session) and time links to "Every call of" its timeline over that range,
// not over the document's whole history (op46: the link dropped since and
// until, and an hour's investigation opened on months of calls).
func TestListTimelineLinkKeepsRange(t *testing.T) {
	st := tempStore(t)
	ctx := context.Background()
	const doc, session = "team/notes.gram", "s-1"
	ids := []string{"c_00000000000000000010", "c_00000000000000000011", "c_00000000000000000012"}
	for i, id := range ids {
		c := &audit.Call{ID: id, Time: t0.Add(time.Duration(i) * time.Hour), Server: "thegram", Session: session,
			Tool: "gram_patch", Method: "tools/call", Responded: true,
			Arguments: []byte(`{"path":"` + doc + `","base_revision":3}`),
			Result:    []byte(`{"isError":false,"structuredContent":{"path":"` + doc + `","rev":4}}`)}
		rec := audit.Record{Call: c, Outcome: audit.OutcomeOK, Tool: c.Tool,
			Ops: []audit.Op{{Tool: c.Tool, Kind: audit.OpWrite, Target: doc, Status: audit.OpSucceeded}}}
		if _, err := st.AppendCalls(ctx, []audit.Record{rec}); err != nil {
			t.Fatal(err)
		}
		f := audit.Finding{Kind: audit.KindDoubleAppliedWrite, Severity: audit.SeverityCritical, Server: "thegram",
			Document: doc, Session: session, Time: c.Time, Calls: []string{id}, Summary: "twice on " + doc}
		if err := st.Commit(ctx, audit.Results{Findings: []audit.Finding{f}}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := New(st, api.New(st, 0.999), Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	c := client(t)
	// The range holds the second call alone, given as the page shows times
	// and as RFC 3339.
	for _, rng := range []string{
		"since=2026-11-02+09%3A30&until=2026-11-02+10%3A30",
		"since=2026-11-02T09%3A30%3A00Z&until=2026-11-02T10%3A30%3A00Z",
	} {
		for _, filter := range []struct{ param, id string }{{"document=team%2Fnotes.gram", "document-timeline"}, {"session=s-1", "session-timeline"}} {
			code, list := body(t, c, "GET", hs.URL+"/?"+filter.param+"&"+rng, nil)
			if code != 200 {
				t.Fatalf("GET /?%s&%s: %d", filter.param, rng, code)
			}
			m := regexp.MustCompile(`<p id="` + filter.id + `">[^<]*<a href="([^"]+)"`).FindStringSubmatch(list)
			if m == nil {
				t.Fatalf("/?%s&%s has no %s link", filter.param, rng, filter.id)
			}
			link := html.UnescapeString(m[1])
			code, tl := body(t, c, "GET", hs.URL+link, nil)
			if code != 200 {
				t.Fatalf("GET %s (the list's link): %d", link, code)
			}
			if !strings.Contains(tl, ids[1]) || strings.Contains(tl, ids[0]) || strings.Contains(tl, ids[2]) {
				t.Errorf("the list over %s links %s, whose timeline does not hold the range's call %s alone (calls outside it: %v, %v)",
					rng, link, ids[1], strings.Contains(tl, ids[0]), strings.Contains(tl, ids[2]))
			}
		}
	}
	// Without a range, the link opens the whole timeline, as before.
	_, list := body(t, c, "GET", hs.URL+"/?document=team%2Fnotes.gram", nil)
	if m := regexp.MustCompile(`<p id="document-timeline">[^<]*<a href="([^"]+)"`).FindStringSubmatch(list); m == nil || html.UnescapeString(m[1]) != "/documents/team%2Fnotes.gram" {
		t.Errorf("without a range, the link is %v, want /documents/team%%2Fnotes.gram", m)
	}
}
