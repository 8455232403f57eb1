package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"context"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// newServer returns the API over a real embedded store holding two
// findings of tenant acme and one of globex, with credentials: a named one
// per tenant, an admin one for every tenant, and a receiver tenant token.
func newLifecycleServer(t *testing.T) (*httptest.Server, []audit.Finding) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fs := []audit.Finding{
		{Kind: audit.KindDoubleAppliedWrite, Severity: audit.SeverityCritical, Server: "thegram", Tenant: "acme",
			Document: "a.gram", Time: t0, Calls: []string{"c_1", "c_2"}, Summary: "twice"},
		{Kind: audit.KindUnverifiedWrite, Severity: audit.SeverityWarning, Server: "thegram", Tenant: "acme",
			Document: "b.gram", Time: t0.Add(time.Minute), Calls: []string{"c_3"}, Reason: audit.ReasonNoResponse, Summary: "unverified"},
		{Kind: audit.KindDoubleAppliedWrite, Severity: audit.SeverityCritical, Server: "thegram", Tenant: "globex",
			Document: "g.gram", Time: t0.Add(2 * time.Minute), Calls: []string{"c_4", "c_5"}, Summary: "twice too"},
	}
	if err := st.Commit(context.Background(), audit.Results{Findings: fs}); err != nil {
		t.Fatal(err)
	}
	s := api.New(st, 0.999)
	s.Tenants = map[string]string{"tok-ingest-acme": "acme"}
	s.Credentials = map[string]api.Credential{
		"alice":  {Token: "tok-alice", Tenant: "acme"},
		"gary":   {Token: "tok-gary", Tenant: "globex"},
		"oncall": {Token: "tok-oncall", Tenant: "*"},
	}
	s.Now = func() time.Time { return t0.Add(time.Hour) }
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs, fs
}

func call(t *testing.T, hs *httptest.Server, method, path, token, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: cannot decode the answer: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

func TestFindingLifecycle(t *testing.T) {
	hs, fs := newLifecycleServer(t)
	acme, globex := fs[0].ID(), fs[2].ID()

	t.Run("findings carry id and open status", func(t *testing.T) {
		var page struct {
			Findings []map[string]any `json:"findings"`
		}
		if code := call(t, hs, "GET", "/api/v1/findings", "tok-alice", "", &page); code != 200 || len(page.Findings) != 2 {
			t.Fatalf("GET findings as alice: %d, %d findings; want 200 and acme's 2", code, len(page.Findings))
		}
		if page.Findings[0]["id"] != acme {
			t.Errorf("first finding id %v, want %s", page.Findings[0]["id"], acme)
		}
		if st, _ := page.Findings[0]["status"].(map[string]any); st["state"] != "open" {
			t.Errorf("status %v, want open", page.Findings[0]["status"])
		}
	})
	t.Run("ack records the credential name", func(t *testing.T) {
		var st audit.FindingStatus
		code := call(t, hs, "POST", "/api/v1/findings/"+acme+"/ack", "tok-alice", `{"note":"looking into it","by":"mallory"}`, &st)
		if code != 200 || st.State != audit.FindingAcknowledged || st.By != "alice" || st.Note != "looking into it" || !st.At.Equal(t0.Add(time.Hour)) {
			t.Fatalf("ack: %d %+v; want acknowledged by alice (not the body's by) at the server's now", code, st)
		}
	})
	t.Run("a receiver tenant token is named after its tenant", func(t *testing.T) {
		var st audit.FindingStatus
		if code := call(t, hs, "POST", "/api/v1/findings/"+acme+"/resolve", "tok-ingest-acme", `{"note":"replayed"}`, &st); code != 200 || st.By != "acme" {
			t.Fatalf("resolve: %d %+v", code, st)
		}
	})
	t.Run("ack of a resolved finding conflicts", func(t *testing.T) {
		var e api.Error
		if code := call(t, hs, "POST", "/api/v1/findings/"+acme+"/ack", "tok-alice", ``, &e); code != http.StatusConflict || !strings.Contains(e.Error, "resolved") {
			t.Fatalf("ack after resolve: %d %q, want 409 naming resolved", code, e.Error)
		}
	})
	t.Run("a note too long is named, however long the body", func(t *testing.T) {
		// A body past the 64 KiB read was cut and answered "unexpected
		// EOF", which named neither the note nor its limit.
		for _, n := range []int{5000, 100000} {
			var e api.Error
			body := `{"note":"` + strings.Repeat("x", n) + `"}`
			if code := call(t, hs, "POST", "/api/v1/findings/"+fs[1].ID()+"/ack", "tok-alice", body, &e); code != http.StatusBadRequest || !strings.Contains(e.Error, "note") || !strings.Contains(e.Error, "4096") {
				t.Errorf("ack with a note of %d bytes: %d %q, want 400 naming the note and its limit of 4096 bytes", n, code, e.Error)
			}
		}
	})
	t.Run("another tenant's finding is not found", func(t *testing.T) {
		var e api.Error
		if code := call(t, hs, "POST", "/api/v1/findings/"+globex+"/ack", "tok-alice", ``, &e); code != http.StatusNotFound {
			t.Fatalf("alice acking globex's finding: %d %q, want 404", code, e.Error)
		}
		if code := call(t, hs, "GET", "/api/v1/findings/"+globex, "tok-alice", ``, &e); code != http.StatusNotFound {
			t.Fatalf("alice reading globex's finding: %d, want 404", code)
		}
	})
	t.Run("the admin credential sees every tenant", func(t *testing.T) {
		var st audit.FindingStatus
		if code := call(t, hs, "POST", "/api/v1/findings/"+globex+"/ack", "tok-oncall", `{}`, &st); code != 200 || st.By != "oncall" {
			t.Fatalf("oncall acking globex's finding: %d %+v", code, st)
		}
	})
	t.Run("detail has the history", func(t *testing.T) {
		var d api.FindingDetail
		if code := call(t, hs, "GET", "/api/v1/findings/"+acme, "tok-alice", ``, &d); code != 200 {
			t.Fatalf("detail: %d", code)
		}
		if d.Finding.ID() != acme || d.Finding.Status.State != audit.FindingResolved || len(d.History) != 2 ||
			d.History[0].By != "alice" || d.History[1].State != audit.FindingResolved {
			t.Fatalf("detail = %+v", d)
		}
	})
	t.Run("state filter and counts", func(t *testing.T) {
		var page audit.FindingPage
		call(t, hs, "GET", "/api/v1/findings?state=open", "tok-oncall", "", &page)
		if len(page.Findings) != 1 || page.Findings[0].ID() != fs[1].ID() {
			t.Errorf("open findings: %+v, want only %s", page.Findings, fs[1].ID())
		}
		var c api.FindingCounts
		call(t, hs, "GET", "/api/v1/findings/counts?kind=double_applied_write", "tok-oncall", "", &c)
		got := map[string]int64{}
		for _, x := range c.Counts {
			got[string(x.Kind)+"/"+string(x.State)] = x.Count
		}
		want := map[string]int64{"double_applied_write/resolved": 1, "double_applied_write/acknowledged": 1}
		if len(got) != len(want) || got["double_applied_write/resolved"] != 1 || got["double_applied_write/acknowledged"] != 1 {
			t.Errorf("counts = %v, want %v", got, want)
		}
		var newest audit.FindingPage
		call(t, hs, "GET", "/api/v1/findings?order=newest", "tok-oncall", "", &newest)
		if len(newest.Findings) != 3 || newest.Findings[0].ID() != globex {
			t.Errorf("newest first starts with %v, want %s", newest.Findings, globex)
		}
	})
	t.Run("bad input names the field", func(t *testing.T) {
		f := func(method, path, body, wantErr string, wantCode int) {
			t.Helper()
			var e api.Error
			if code := call(t, hs, method, path, "tok-oncall", body, &e); code != wantCode || !strings.Contains(e.Error, wantErr) {
				t.Errorf("%s %s %s: %d %q, want %d naming %q", method, path, body, code, e.Error, wantCode, wantErr)
			}
		}
		f("POST", "/api/v1/findings/"+acme+"/ack", `{"nope":1}`, "body", 400)
		f("POST", "/api/v1/findings/"+acme+"/ack", `{"note":"`+strings.Repeat("x", 5000)+`"}`, "note", 400)
		f("POST", "/api/v1/findings/"+acme+"/close", `{}`, "ack", 404)
		f("GET", "/api/v1/findings?state=closed", ``, "state", 400)
		f("GET", "/api/v1/findings?order=oldest", ``, "order", 400)
		f("POST", "/api/v1/findings/f_00000000000000000000/ack", `{}`, "not found", 404)
	})
	t.Run("no token, no change", func(t *testing.T) {
		if code := call(t, hs, "POST", "/api/v1/findings/"+acme+"/reopen", "", `{}`, nil); code != http.StatusUnauthorized {
			t.Errorf("reopen without a token: %d, want 401", code)
		}
		if code := call(t, hs, "POST", "/api/v1/findings/"+acme+"/reopen", "tok-wrong", `{}`, nil); code != http.StatusUnauthorized {
			t.Errorf("reopen with an unknown token: %d, want 401", code)
		}
	})
}
