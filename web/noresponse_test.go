package web

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

// noResponseStore stores, in a real SQLite store, a gram_patch on doc that
// saw neither a response nor a transport error, with the unverified_write
// it is evidence of, and serves the page over it.
func noResponseStore(t *testing.T, doc string) (*httptest.Server, audit.Finding) {
	t.Helper()
	st := tempStore(t)
	ctx := context.Background()
	c := &audit.Call{ID: "c_0000000000000000000a", Time: t0, Server: "thegram-long", Session: "op20-s-long-name-session",
		Tool: "gram_patch", Method: "tools/call", Arguments: []byte(`{"path":` + jsonString(doc) + `,"base_revision":3}`)}
	rec := audit.Record{Call: c, Outcome: audit.OutcomeNoResponse, Tool: c.Tool,
		Failure: &audit.Failure{Code: "no_response", Action: audit.ActionReplaySameRequest},
		Ops:     []audit.Op{{Tool: c.Tool, Kind: audit.OpWrite, Target: doc, Status: audit.OpUncertain}}}
	if _, err := st.AppendCalls(ctx, []audit.Record{rec}); err != nil {
		t.Fatal(err)
	}
	f := audit.Finding{Kind: audit.KindUnverifiedWrite, Severity: audit.SeverityWarning, Server: c.Server, Document: doc,
		Session: c.Session, Time: c.Time, Calls: []string{c.ID}, Summary: "Nobody established whether the write to " + doc + " is durable."}
	if err := st.Commit(ctx, audit.Results{Findings: []audit.Finding{f}}); err != nil {
		t.Fatal(err)
	}
	p, err := New(st, api.New(st, 0.999), Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	return hs, f
}

func jsonString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}

// TestNoResponse_SaidOnce (op20's D5): a call that saw neither a response
// nor a transport error shows its outcome once and what its code means,
// not "no_response / no_response" (the timeline, the finding's evidence,
// the call's page).
func TestNoResponse_SaidOnce(t *testing.T) {
	hs, f := noResponseStore(t, "notes.gram")
	c := client(t)
	for _, path := range []string{"/documents/notes.gram", "/findings/" + f.ID(), "/calls/" + f.Calls[0]} {
		_, page := body(t, c, "GET", hs.URL+path, nil)
		if strings.Count(page, "no_response") != 1 || !strings.Contains(page, "neither response nor transport error seen") {
			t.Errorf("%s says no_response %d times (want once) and what it means: %v", path, strings.Count(page, "no_response"),
				strings.Contains(page, "neither response nor transport error seen"))
		}
	}
}
