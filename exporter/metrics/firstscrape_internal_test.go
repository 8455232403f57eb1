package metrics

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestMetrics_FirstScrapeMarksBounded (found in review): scrapers beyond
// maxScrapers are not remembered, and must not add their identity to
// every held group's marks either, which grew with every User-Agent.
func TestMetrics_FirstScrapeMarksBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, Options{FirstScrapeWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(reg, promhttp.HandlerOpts{})
	prom := httptest.NewRequest("GET", "/metrics", nil)
	prom.Header.Set("User-Agent", "Prometheus/2.42.0")
	h.ServeHTTP(httptest.NewRecorder(), prom) // remembered; next scrape in a minute
	m.Write(&audit.Write{Server: "s", Tool: "t", State: audit.StateDurable}, "")
	for i := range 5000 {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("User-Agent", fmt.Sprintf("ua-%d", i))
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for g := range m.held {
		if len(g.shown) > maxScrapers {
			t.Errorf("a held group remembers %d scraper identities; scrapers are bounded at %d", len(g.shown), maxScrapers)
		}
	}
}
