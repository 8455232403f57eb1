package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

// TestIndexWithdrawn: the page asked for state=withdrawn counts the
// withdrawn findings it lists, as /api/v1/findings/counts?state=withdrawn
// does, and the page without a state neither lists nor counts them
// (fx19w, D2 of live19: "Findings matching 0" and "No findings match"
// stood above a list of withdrawn findings).
func TestIndexWithdrawn(t *testing.T) {
	st := tempStore(t)
	ctx := context.Background()
	var fs []audit.Finding
	for i := range 3 {
		fs = append(fs, audit.Finding{Kind: audit.KindUnverifiedWrite, Severity: audit.KindUnverifiedWrite.Severity(),
			Server: "thegram", Document: "notes.gram", Time: t0.Add(time.Duration(i) * time.Second),
			Calls:   []string{[]string{"c_00000000000000000001", "c_00000000000000000002", "c_00000000000000000003"}[i]},
			Summary: "no proof"})
	}
	if err := st.Commit(ctx, audit.Results{Findings: fs}); err != nil {
		t.Fatal(err)
	}
	for _, f := range fs[:2] {
		ch := audit.FindingChange{FindingID: f.ID(), State: audit.FindingWithdrawn, By: "mcpaudit",
			Note: "withdrawn by a late call", Time: t0.Add(time.Minute)}
		if _, err := st.ChangeFinding(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	p, err := New(st, api.New(st, 0.999), Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	total := regexp.MustCompile(`id="total">(\d+)<`)
	rows := regexp.MustCompile(`<tr class="finding"`)
	f := func(query, wantTotal string, wantRows int, wantCounts string) {
		t.Helper()
		code, page := body(t, client(t), http.MethodGet, hs.URL+"/"+query, nil)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", query, code, page)
		}
		m := total.FindStringSubmatch(page)
		if m == nil || m[1] != wantTotal {
			t.Errorf("%s: findings matching %v, want %s", query, m, wantTotal)
		}
		if n := len(rows.FindAllString(page, -1)); n != wantRows {
			t.Errorf("%s: %d findings listed, want %d", query, n, wantRows)
		}
		counts := page[strings.Index(page, `id="counts"`):strings.Index(page, "<h2>Findings, newest first")]
		if strings.Contains(counts, "No findings match") != (wantCounts == "") {
			t.Errorf("%s: counts table %s", query, counts)
		}
		if wantCounts != "" && !strings.Contains(counts, wantCounts) {
			t.Errorf("%s: counts table %s, want it to hold %s", query, counts, wantCounts)
		}
	}
	f("", "1", 1, `<td class="n">1</td><td class="n">0</td><td class="n">0</td><td class="n">1</td>`)
	f("?state=withdrawn", "2", 2, `<td class="n">0</td><td class="n">0</td><td class="n">0</td><td class="n">2</td><td class="n">2</td>`)
	f("?state=open", "1", 1, `<td class="n">1</td><td class="n">0</td><td class="n">0</td><td class="n">1</td>`)
	f("?state=resolved", "0", 0, "")
}
