package web

import (
	"context"
	"html"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

// TestSLO_StoredWrites: /slo over 30 days that hold no write says where
// the stored writes lie, first and last, with a link that ends the page
// there, as the report's stored_writes and mcpaudit slo say it (op47:
// the page offered the watermark alone, and said no time of them).
func TestSLO_StoredWrites(t *testing.T) {
	st := tempStore(t)
	ctx := context.Background()
	at := time.Date(2026, 10, 2, 9, 30, 15, 0, time.UTC)
	ws := []audit.Write{
		{CallID: "c_a", Time: at, Server: "thegram", Tool: "gram_patch", State: audit.StateDurable, StateTime: at},
		{CallID: "c_b", Time: at.Add(36 * time.Hour), Server: "thegram", Tool: "gram_patch", State: audit.StateUnverified, StateTime: at},
	}
	if err := st.Commit(ctx, audit.Results{Writes: ws}); err != nil {
		t.Fatal(err)
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
	page := get("/slo?until=2026-12-07T00:00:00Z")
	want := "the stored writes run from 2026-10-02 09:30:15.000 to 2026-10-03 21:30:15.000"
	if !strings.Contains(page, want) || !strings.Contains(page, `<a id="stored" href="/slo?until=2026-10-03+21%3A31">show the 30 days ending 2026-10-03 21:31</a>`) {
		t.Errorf("/slo over an empty window lacks %q and the link to the window ending at the last write:\n%s", want, page)
	}
	page = get("/slo?until=2026-10-04T00:00:00Z")
	if strings.Contains(page, "stored-writes") {
		t.Errorf("/slo over a window that holds the writes says where they lie")
	}
}
