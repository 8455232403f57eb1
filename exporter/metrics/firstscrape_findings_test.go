package metrics_test

import (
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestMetrics_FirstScrapeFindings: a server's findings series are made at
// zero with the server, but in serve the server is first seen when its
// first calls are judged, and the findings of that same batch come at once:
// the series were born with those findings in them, and a Prometheus
// already scraping took them as its baseline. Found from outside (out46):
// 51 calls through mcpaudit wrap, 12 wasted retries among them, and
// mcpaudit_findings_total{kind="wasted_retry"} first scraped at 5, so that
// increase() (McpAuditWastedRetries' numerator) missed them while the
// held call counts were all seen. The first findings now wait for the
// scrapers as a tool's first calls do.
func TestMetrics_FirstScrapeFindings(t *testing.T) {
	m, reg := newMetrics(t, metrics.Options{FirstScrapeWait: time.Hour})
	prom := newPromCounters(t, m.Scraper(reg))
	prom.scrape() // Prometheus scrapes from the start: the server is not there yet

	// One judged batch of a server nobody had seen: its calls, a finding
	// about them, and a finding withdrawn, all before the next scrape.
	m.Call(&audit.Record{Call: &audit.Call{Server: "thegram-wrap", Tool: "gram_read", Time: t0}, Outcome: audit.OutcomeToolError, Tool: "gram_read",
		Failure: &audit.Failure{Code: "E_ARGUMENT", Action: audit.ActionFixInput}})
	wasted := &audit.Finding{Kind: audit.KindWastedRetry, Server: "thegram-wrap", Time: t0}
	m.Finding(wasted)
	m.Finding(wasted)
	unsafe := &audit.Finding{Kind: audit.KindUnsafeRetry, Server: "thegram-wrap", Time: t0}
	m.Finding(unsafe)
	m.WithdrawFinding(unsafe, "", t0)
	prom.scrape()
	prom.scrape()
	// A later finding, after the series were shown, counts at once.
	m.Finding(wasted)
	prom.scrape()

	f := prom.wantIncrease
	f("mcpaudit_findings_total{kind=wasted_retry,server=thegram-wrap,severity=info}", 3)
	f("mcpaudit_findings_total{kind=unsafe_retry,server=thegram-wrap,severity=warning}", 1)
	f("mcpaudit_findings_withdrawn_total{kind=unsafe_retry,server=thegram-wrap,severity=warning}", 1)
	f("mcpaudit_tool_calls_total{outcome=tool_error,server=thegram-wrap,tool=gram_read}", 1)
}
