package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

// TestFindingRunbookLink: a finding's page links to its kind's step in the
// runbook document serve is given (rules.runbook_url), and to none when it
// has none. op23 D4: the finding that paged had no runbook anywhere.
func TestFindingRunbookLink(t *testing.T) {
	st := tempStore(t)
	f := audit.Finding{Kind: audit.KindDoubleAppliedWrite, Severity: audit.KindDoubleAppliedWrite.Severity(),
		Server: "thegram", Document: "notes.gram", Time: t0, Calls: []string{"c_00000000000000000001"}, Summary: "twice"}
	if err := st.Commit(context.Background(), audit.Results{Findings: []audit.Finding{f}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ runbook, want string }{
		{"https://wiki.example.com/mcpaudit/runbooks", `id="runbook-link" href="https://wiki.example.com/mcpaudit/runbooks#mcpauditfinding-double_applied_write"`},
		{"", ""},
	} {
		p, err := New(st, api.New(st, 0.999), Config{}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		p.LinkRunbook(tc.runbook)
		hs := httptest.NewServer(p.Handler())
		code, page := body(t, client(t), http.MethodGet, hs.URL+"/findings/"+f.ID(), nil)
		hs.Close()
		if code != http.StatusOK {
			t.Fatalf("%d %s", code, page)
		}
		if tc.want == "" {
			if strings.Contains(page, "runbook-link") {
				t.Errorf("no runbook given, yet the page links one")
			}
			continue
		}
		if !strings.Contains(page, tc.want) {
			i := strings.Index(page, `id="next-step"`)
			t.Errorf("the finding's page does not hold %s; its next step:\n%s", tc.want, page[i:min(len(page), i+800)])
		}
	}
}
