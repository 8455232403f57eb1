package rules_test

import (
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/rules"
)

// TestInvestigationURL checks that every alert about findings, writes or
// the SLO links to the page view of its server, under the configured base.
func TestInvestigationURL(t *testing.T) {
	collector := map[string]bool{"McpAuditIngestRejections": true, "McpAuditSourceLagging": true, "McpAuditCallsNotJudged": true, "McpAuditIDCollisions": true, "McpAuditSourcesOverflow": true, "McpAuditClockAhead": true, "McpAuditClockBehind": true, "McpAuditCollectorDown": true, "McpAuditCollectorAbsent": true, "McpAuditServeCrashed": true,
		"McpAuditRelayDroppingRecords": true, "McpAuditRelayNotDelivering": true,
		"McpAuditSpoolFileRejected": true, "McpAuditIDIndexWriteFailures": true,
		"McpAuditIDIndexCorrupt": true, "McpAuditSpoolTailCut": true, "McpAuditSpoolFilesSetAside": true,
		"McpAuditSpoolFilling": true, "McpAuditStoreUnavailable": true, "McpAuditStoreRefusingCalls": true, "McpAuditWithdrawalsWaiting": true}
	for _, base := range []string{"", "https://audit.example.com/mcp/"} {
		o := rules.DefaultOptions()
		if base != "" {
			o.WebURL = base
		}
		f, err := rules.Build(o)
		if err != nil {
			t.Fatal(err)
		}
		want := strings.TrimRight(o.WebURL, "/") + "/"
		for _, a := range f.Alerts() {
			u, ok := a.Annotations["investigation_url"]
			if collector[a.Alert] {
				if ok {
					t.Errorf("%s: a collector alert links to the page it cannot reach: %s", a.Alert, u)
				}
				continue
			}
			if !strings.HasPrefix(u, want) || !strings.Contains(u, "server={{ $labels.server | urlquery }}") {
				t.Errorf("%s: investigation_url %q, want a view under %s for the alert's server", a.Alert, u, want)
			}
		}
	}
	if _, err := rules.Build(rules.Options{WebURL: "ftp://x"}); err == nil || !strings.Contains(err.Error(), "web_url") {
		t.Errorf("a bad web_url: %v, want an error naming web_url", err)
	}
}
