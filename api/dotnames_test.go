package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// oddNames are document names a path cannot always carry: the dot segments
// a browser resolves, and others a careless client might mangle.
var oddNames = []string{".", "..", "a/..", "a/.", "%2E", "a b&c=d#e", "ops/a.gram"}

// newOddNameServer serves the API over a real embedded store holding two
// writes on each of oddNames, a second apart.
func newOddNameServer(t *testing.T) *httptest.Server {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var recs []audit.Record
	for i, doc := range oddNames {
		for j := range 2 {
			recs = append(recs, mkCall(2*i+j, "", "thegram", "s-1", t0.Add(time.Duration(2*i+j)*time.Second), "gram_read", doc))
		}
	}
	if _, err := st.AppendCalls(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	q := api.New(st, 0.999)
	q.Now = func() time.Time { return t0.Add(2 * time.Hour) }
	srv := httptest.NewServer(q.Handler())
	t.Cleanup(srv.Close)
	return srv
}

// TestTimelineByName: GET /api/v1/documents/timeline?name= answers the
// timeline of any document, "." and ".." included, when the URL is resolved
// as a browser resolves it (dot segments removed), with the parameters and
// paging of the path form.
func TestTimelineByName(t *testing.T) {
	srv := newOddNameServer(t)
	base, err := url.Parse(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	get := func(ref string) (int, []byte) {
		t.Helper()
		u, err := url.Parse(ref)
		if err != nil {
			t.Fatal(err)
		}
		status, _, body := do(t, "GET", base.ResolveReference(u).String(), "")
		return status, body
	}
	for _, name := range oddNames {
		t.Run(url.PathEscape(name), func(t *testing.T) {
			ref := "/api/v1/documents/timeline?name=" + url.QueryEscape(name)
			status, body := get(ref)
			if status != 200 {
				t.Fatalf("%s: %d %s", ref, status, body)
			}
			var tl api.Timeline
			if err := json.Unmarshal(body, &tl); err != nil {
				t.Fatal(err)
			}
			if tl.Document != name || len(tl.Events) != 2 || tl.Truncated {
				t.Fatalf("%s: document %q with %d events (truncated %v), want %q with its 2 calls: %s",
					ref, tl.Document, len(tl.Events), tl.Truncated, name, body)
			}
			for _, e := range tl.Events {
				if e.Type != audit.EventCall || !strings.HasPrefix(e.CallID, "c_") {
					t.Errorf("%s: event %+v is not one of the document's calls", ref, e)
				}
			}
			// Paging reads the same as the path form's, byte for byte,
			// where the path form can be sent (by a client that does
			// not resolve dot segments, as Go's does not).
			paged := ref + "&limit=1&server=thegram&since=" + url.QueryEscape(t0.Add(-time.Hour).Format(time.RFC3339))
			status, byName := get(paged)
			if status != 200 || !bytes.Contains(byName, []byte(`"truncated":true`)) || !bytes.Contains(byName, []byte(`"next_since"`)) {
				t.Fatalf("%s: %d %s, want a page of 1 event, truncated, with next_since", paged, status, byName)
			}
			if name == "." || name == ".." {
				return
			}
			path := "/api/v1/documents/" + url.PathEscape(name) + "/timeline?limit=1&server=thegram&since=" + url.QueryEscape(t0.Add(-time.Hour).Format(time.RFC3339))
			_, _, byPath := do(t, "GET", srv.URL+path, "")
			if !bytes.Equal(byName, byPath) {
				t.Errorf("query form:\n%s\npath form:\n%s", byName, byPath)
			}
		})
	}
	for _, tc := range []struct {
		ref  string
		says string
	}{
		{"/api/v1/documents/timeline", `parameter name: want the document's name`},
		{"/api/v1/documents/timeline?name=", `parameter name: want the document's name`},
		{"/api/v1/documents/timeline?name=.&name=..", `parameter name: given 2 times`},
		{"/api/v1/documents/timeline?name=.&kind=x", `takes name, server, since, until, limit`},
		{"/api/v1/documents/timeline?name=.&limit=-1", `parameter limit`},
		{"/api/v1/documents/timeline?name=.&since=1h&until=2h", `parameter until`},
		// The path form takes no name: two names would be one too many.
		{"/api/v1/documents/ops%2Fa.gram/timeline?name=.", `takes server, since, until, limit`},
	} {
		status, body := get(tc.ref)
		if status != 400 || !strings.Contains(string(body), tc.says) {
			t.Errorf("%s: %d %s, want 400 saying %q", tc.ref, status, body, tc.says)
		}
	}
}
