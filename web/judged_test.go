package web

import (
	"context"
	"encoding/json"
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
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// syncPending is a gram_patch on doc at at that succeeded with its sync
// pending: a write the detector leaves pending until its window ends.
func syncPending(i int, doc string, at time.Time) *audit.Record {
	return &audit.Record{
		Call:    &audit.Call{ID: fmt.Sprintf("c_%020d", i), Time: at, Server: "thegram", Session: "s", RPCID: fmt.Sprint(i), Method: "tools/call", Tool: "gram_patch", Responded: true},
		Dialect: "thegram", Outcome: audit.OutcomeOK, Tool: "gram_patch",
		Ops: []audit.Op{{Tool: "gram_patch", Kind: audit.OpWrite, Target: doc, Status: audit.OpSucceeded, Pending: true, Reason: "sync_pending"}},
	}
}

// TestStatusBar_JudgedAndPending: the status bar says what the first two
// lines of mcpaudit status say, for the caller's tenant: whether every
// acknowledged call is judged, and how many judged writes are still
// pending with the event time the last window ends, mcpaudit status's
// line on them (api.PendingLine) as the item's title. A real engine holds
// three writes pending, judged; then a call waits for its watermark.
func TestStatusBar_JudgedAndPending(t *testing.T) {
	e := detect.NewEngine(detect.NewDefaultConfig())
	t0 := time.Date(2026, 12, 5, 14, 0, 0, 0, time.UTC)
	for i := range 3 {
		e.Add("pod", syncPending(i, fmt.Sprintf("d%d.gram", i), t0.Add(time.Duration(i)*time.Second)), time.Time{})
	}
	e.Flush()
	wall := t0.Add(10 * time.Second)
	hs, q := engineStatusPage(t, e, &wall)
	c := client(t)
	judged := regexp.MustCompile(`<b id="judged">([^<]*)</b>`)
	pending := regexp.MustCompile(`<span id="pending" title="([^"]*)">judged writes pending <b id="pending-writes">([^<]*)</b>`)
	look := func(path string) (judgedText, title, pendingText string) {
		t.Helper()
		_, page := body(t, c, "GET", hs.URL+path, nil)
		j, p := judged.FindStringSubmatch(page), pending.FindStringSubmatch(page)
		if j == nil || p == nil {
			t.Fatalf("GET %s: no judged (%v) or pending writes (%v) in the status bar:\n%s", path, j, p, page)
		}
		return j[1], html.UnescapeString(p[1]), html.UnescapeString(p[2])
	}

	st, _ := q.StatusOf("", "", wall)
	line, _ := api.PendingLine(st)
	if !st.Judged || st.PendingWrites != 3 || !strings.Contains(line, "3 are still pending") {
		t.Fatalf("the engine's status: judged %v, %d pending (%q); the test needs 3 judged pending writes", st.Judged, st.PendingWrites, line)
	}
	until := funcs["ts"].(func(time.Time) string)(api.PendingUntil(st))
	if !strings.HasPrefix(until, "2026-12-05 14:") {
		t.Fatalf("the last window ends at %q", until)
	}
	for _, path := range []string{"/", "/slo"} {
		j, title, p := look(path)
		if j != "yes" || p != "3, last window ends "+until || title != line {
			t.Errorf("GET %s: judged %q, pending %q (title %q); want yes, %q, and mcpaudit status's line %q", path, j, p, title, "3, last window ends "+until, line)
		}
	}
	// Another tenant's view counts its own partitions: none.
	j, title, p := look("/?tenant=acme")
	if none, _ := api.PendingLine(api.StatusResponse{}); j != "yes" || p != "none" || title != none {
		t.Errorf("tenant acme: judged %q, pending %q (title %q), want yes, none, %q", j, p, title, none)
	}

	// A call waiting for its watermark: not every acknowledged call is
	// judged.
	e.Add("pod", syncPending(3, "d3.gram", wall), time.Time{})
	if j, _, _ := look("/"); j != "no" {
		t.Errorf("with a call waiting for its watermark, judged %q, want no", j)
	}
}

// TestTimelineRevisions_AsTheCLI: a call's revision and hash cells show
// what mcpaudit timeline prints (before → after, a dash for a side the
// payloads do not tell, a dash alone when neither is told), and a
// revision or hash is the sender's text: shown as text, never markup.
func TestTimelineRevisions_AsTheCLI(t *testing.T) {
	st := tempStore(t)
	const doc = "team/rev.gram"
	const (
		img    = `<img src=x onerror=alert(1)>`
		script = `<script>alert(2)</script>`
		cell   = `</td><td class="mono">9`
	)
	base := time.Date(2026, 12, 5, 14, 0, 0, 0, time.UTC)
	calls := []struct {
		args, result string
		rev, hash    string
	}{
		{`{"path":"` + doc + `"}`, `{"isError":false,"structuredContent":{"path":"` + doc + `","rev":7,"hash":"aa11"}}`, "— → 7", "— → aa11"},
		{`{"path":"` + doc + `","base_revision":7,"expected_hash":"aa11"}`, ``, "7 → —", "aa11 → —"},
		{`{"path":"` + doc + `"}`, ``, "—", "—"},
		{string(mustJSON(t, map[string]any{"path": doc, "base_revision": img, "expected_hash": script})),
			string(mustJSON(t, map[string]any{"isError": false, "structuredContent": map[string]any{"path": doc, "rev": cell, "hash": "&lt;b&gt;"}})),
			img + " → " + cell, script + " → &lt;b&gt;"},
	}
	for i, c := range calls {
		call := &audit.Call{ID: fmt.Sprintf("c_%020d", i+1), Time: base.Add(time.Duration(i) * time.Second), Server: "thegram", Session: "s-rev",
			Tool: "gram_patch", Method: "tools/call", Responded: c.result != "", Arguments: []byte(c.args), Result: []byte(c.result)}
		rec := audit.Record{Call: call, Outcome: audit.OutcomeOK, Tool: call.Tool,
			Ops: []audit.Op{{Tool: call.Tool, Kind: audit.OpWrite, Target: doc, Status: audit.OpSucceeded}}}
		if _, err := st.AppendCalls(context.Background(), []audit.Record{rec}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := New(st, api.New(st, 0.999), Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	for _, path := range []string{"/documents/" + url.PathEscape(doc), "/sessions/s-rev"} {
		_, page := body(t, client(t), "GET", hs.URL+path, nil)
		if strings.Contains(page, "<img") || strings.Contains(page, "<script>") || strings.Contains(page, cell) {
			t.Errorf("GET %s: a sender's revision or hash is markup on the page:\n%s", path, page)
		}
		rows := regexp.MustCompile(`(?s)<tr class="call[^"]*" data-call="[^"]*".*?</tr>`).FindAllString(page, -1)
		if len(rows) != len(calls) {
			t.Fatalf("GET %s: %d call rows, want %d:\n%s", path, len(rows), len(calls), page)
		}
		for i, r := range rows {
			m := regexp.MustCompile(`<td class="mono">([^<]*)</td>\s*<td class="mono">([^<]*)</td>`).FindStringSubmatch(r)
			if m == nil {
				t.Errorf("GET %s: row %d has no revision and hash cells:\n%s", path, i, r)
				continue
			}
			if rev, hash := html.UnescapeString(m[1]), html.UnescapeString(m[2]); rev != calls[i].rev || hash != calls[i].hash {
				t.Errorf("GET %s: row %d shows revision %q hash %q, want %q and %q", path, i, rev, hash, calls[i].rev, calls[i].hash)
			}
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
