package pipeline_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
)

// TestFindingLog: one JSON line per finding with its id and kind, no
// document, session or summary, and no more than the burst a minute.
func TestFindingLog(t *testing.T) {
	var buf syncBuffer
	l := pipeline.NewFindingLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	f := &audit.Finding{Kind: audit.KindDoubleAppliedWrite, Severity: audit.SeverityCritical, Server: "thegram", Tenant: "acme",
		Document: "vault/secret-plans.gram", Session: "sess-42", Time: time.Date(2026, 12, 1, 14, 2, 0, 0, time.UTC),
		Calls: []string{"c1", "c2"}, Summary: "applied twice: secret-plans"}
	l.Finding(f)
	var m map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(buf.String())), &m); err != nil {
		t.Fatalf("%q: %v", buf.String(), err)
	}
	if m["id"] != f.ID() || m["finding_kind"] != string(audit.KindDoubleAppliedWrite) || m["kind"] != "finding" ||
		m["evidence_calls"] != float64(2) || m["tenant"] != "acme" || m["level"] != "INFO" {
		t.Errorf("line %v: want the finding's id %s, its kind, tenant and 2 evidence calls", m, f.ID())
	}
	for _, private := range []string{"secret-plans", "sess-42"} {
		if strings.Contains(buf.String(), private) {
			t.Errorf("the line holds %q: %s", private, buf.String())
		}
	}
	for i := range pipeline.FindingLogBurst * 2 {
		g := *f
		g.Calls = []string{"c", string(rune('a' + i%26)), time.Duration(i).String()}
		l.Finding(&g)
	}
	if n := strings.Count(buf.String(), "\n"); n != pipeline.FindingLogBurst {
		t.Errorf("%d lines after %d findings in a minute, want the burst of %d", n, 1+2*pipeline.FindingLogBurst, pipeline.FindingLogBurst)
	}
	l.Flush()
	if !strings.Contains(buf.String(), `"suppressed":`) {
		t.Errorf("flush wrote no count of the suppressed lines")
	}
}
