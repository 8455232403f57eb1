package metrics_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestMetrics_FirstScrapeNewFailureSeries (found in review): a failure
// series made while its tool's group is held (a code other than
// COMMIT_UNKNOWN or in_flight_unknown) waits until every scraper has shown
// it at zero, not only the group's first series: scraper a showed the
// group before the series existed, and b's scrape released it, so a's
// first sample of the series already held the count.
func TestMetrics_FirstScrapeNewFailureSeries(t *testing.T) {
	m, reg := newMetrics(t, metrics.Options{FirstScrapeWait: time.Hour})
	h := m.Handler(reg, promhttp.HandlerOpts{})
	a := newHandlerScraper(t, h, "10.0.0.1", "Prometheus/2.42.0")
	b := newHandlerScraper(t, h, "10.0.0.2", "Prometheus/2.42.0")
	a.scrape()
	b.scrape()
	call := func(f *audit.Failure) {
		m.Call(&audit.Record{Call: &audit.Call{Server: "s", Tool: "gram_patch", Time: t0}, Outcome: audit.OutcomeToolError, Tool: "gram_patch", Failure: f})
	}
	call(nil)
	a.scrape()                                                                      // a shows the group (outcome series) at zero
	call(&audit.Failure{Code: "E_CONFLICT", Action: audit.ActionReplaySameRequest}) // new series, held
	b.scrape()                                                                      // b shows the new series at zero; a has not yet
	a.scrape()                                                                      // now both have: released
	b.scrape()
	a.scrape()
	const key = "mcpaudit_call_failures_total{code=other,retry_action=replay_same_request,server=s,tool=gram_patch}"
	for name, p := range map[string]*promCounters{"a": a, "b": b} {
		if got := p.increase[key]; got != 1 {
			t.Errorf("scraper %s: increase of %s = %v, want 1", name, key, got)
		}
	}
}

type brokenWriter struct{ http.ResponseWriter }

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("client gone (scrape timeout)") }

// TestMetrics_FirstScrapeUndelivered (found in review): a scrape whose
// response never reached Prometheus (its scrape_timeout passed, the
// connection closed) counted as the scraper having shown the series at
// zero, and released the counts into the sample its next scrape took as
// its baseline.
func TestMetrics_FirstScrapeUndelivered(t *testing.T) {
	m, reg := newMetrics(t, metrics.Options{FirstScrapeWait: time.Hour})
	h := m.Handler(reg, promhttp.HandlerOpts{})
	a := newHandlerScraper(t, h, "10.0.0.1", "Prometheus/2.42.0")
	a.scrape()
	for range 20 {
		m.Write(&audit.Write{Server: "s", Tool: "gram_patch", Time: t0, StateTime: t0, State: audit.StateDurable}, "")
	}
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.RemoteAddr = "10.0.0.1:40000"
	req.Header.Set("User-Agent", "Prometheus/2.42.0")
	h.ServeHTTP(brokenWriter{httptest.NewRecorder()}, req) // lost on the way
	a.scrape()
	a.scrape()
	const key = "mcpaudit_writes_total{server=s,state=durable,tool=gram_patch}"
	if got := a.increase[key]; got != 20 {
		t.Errorf("increase of %s = %v, want 20", key, got)
	}
}
