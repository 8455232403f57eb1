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

// TestFinding_NextStepLeads: a finding's "Safe next step" begins with what
// to do about the finding. For a double application, the uncertain call's
// retry action (replay_same_request) comes after the repair, said to be
// the client's step then and not one to take now; for an unverified write
// it is the step to take, and a blocked save says to split the document.
// Every kind has its step (op23's D11: "Resend the identical intent with
// the same key" led the page of a double_applied_write).
func TestFinding_NextStepLeads(t *testing.T) {
	st := tempStore(t)
	const doc = "research/log-153acd.gram"
	fs := []audit.Finding{
		{Kind: audit.KindDoubleAppliedWrite, RetryAction: audit.ActionReplaySameRequest},
		{Kind: audit.KindUnverifiedWrite, Reason: audit.ReasonNoResponse, RetryAction: audit.ActionVerifyThenDecide},
		{Kind: audit.KindUnverifiedWrite, Reason: audit.ReasonSaveBlocked},
	}
	for i := range fs {
		f := &fs[i]
		f.Severity, f.Server, f.Document, f.Session = f.Kind.Severity(), "thegram", doc, "s-1"
		f.Time, f.Calls, f.Summary = t0.Add(time.Duration(i)*time.Second), []string{"c_0000000000000000000" + string(rune('1'+i))}, string(f.Kind)
		if err := st.Commit(context.Background(), audit.Results{Findings: []audit.Finding{*f}}); err != nil {
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
	step := func(f audit.Finding) []string {
		t.Helper()
		_, page := body(t, c, "GET", hs.URL+"/findings/"+f.ID(), nil)
		m := regexp.MustCompile(`(?s)<div class="next" id="next-step">(.*?)</div>`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("%s: no next step on the page", f.Kind)
		}
		var ps []string
		for _, p := range regexp.MustCompile(`(?s)<p[^>]*>(.*?)</p>`).FindAllStringSubmatch(m[1], -1) {
			ps = append(ps, html.UnescapeString(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(p[1], "")))
		}
		return ps
	}

	ps := step(fs[0])
	if len(ps) != 2 || !strings.HasPrefix(ps[0], "The same edit is in the document twice: do not resend either call.") ||
		!strings.Contains(ps[1], "replay_same_request, the uncertain call's retry action") ||
		!strings.Contains(ps[1], "It was the client's safe step then, not one to take now: Resend the identical intent") {
		t.Errorf("double_applied_write: the next step reads\n%q\nwant the repair first, then the retry action as the client's step then", ps)
	}
	ps = step(fs[1])
	if len(ps) != 2 || !strings.HasPrefix(ps[0], "Nobody established whether this write landed.") ||
		!strings.HasPrefix(ps[1], "verify_then_decide: ") || !strings.Contains(ps[1], "Next: Read the target's current state first") {
		t.Errorf("unverified_write (no_response): the next step reads\n%q\nwant the kind's step, then verify_then_decide's", ps)
	}
	ps = step(fs[2])
	if len(ps) != 1 || !strings.Contains(ps[0], "split the document into smaller ones") {
		t.Errorf("unverified_write (save_blocked): the next step reads\n%q\nwant the split", ps)
	}
	for _, k := range audit.Kinds {
		if KindSteps[k] == "" {
			t.Errorf("kind %s has no next step", k)
		}
	}
}
