package metrics_test

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// promCounters reads counters through scrapes as Prometheus does: a series'
// first sample is its baseline, and only what it gains after that, or its
// whole value after a reset, is an increase.
type promCounters struct {
	t        *testing.T
	g        prometheus.Gatherer
	last     map[string]float64
	increase map[string]float64
}

func newPromCounters(t *testing.T, g prometheus.Gatherer) *promCounters {
	return &promCounters{t: t, g: g, last: map[string]float64{}, increase: map[string]float64{}}
}

func (p *promCounters) scrape() {
	p.t.Helper()
	mfs, err := p.g.Gather()
	if err != nil {
		p.t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			if mt.GetCounter() == nil {
				continue
			}
			var ls []string
			for _, lp := range mt.GetLabel() {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			sort.Strings(ls)
			key := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			v := mt.GetCounter().GetValue()
			if last, ok := p.last[key]; ok {
				if v >= last {
					p.increase[key] += v - last
				} else {
					p.increase[key] += v
				}
			}
			p.last[key] = v
		}
	}
}

// TestMetrics_FirstScrape: the first counts of a server nobody had seen
// show as an increase to a Prometheus that was already scraping, so that
// the SLO's error ratio is not made of the later writes alone (the
// reporter's case: 20 durable writes of a new server, then a double-applied
// pair, read 0.476 instead of 1/22).
func TestMetrics_FirstScrape(t *testing.T) {
	m, reg := newMetrics(t, metrics.Options{FirstScrapeWait: time.Hour})
	prom := newPromCounters(t, m.Scraper(reg))
	prom.scrape() // Prometheus scrapes from the start: the server is not there yet

	patch := func(states ...audit.WriteState) {
		m.Call(&audit.Record{Call: &audit.Call{Server: "thegram-birth", Tool: "gram_patch", Time: t0}, Outcome: audit.OutcomeOK, Tool: "gram_patch"})
		prev := audit.WriteState("")
		for _, st := range states {
			m.Write(&audit.Write{Server: "thegram-birth", Tool: "gram_patch", Time: t0, StateTime: t0, State: st}, prev)
			prev = st
		}
	}
	for range 20 {
		patch(audit.StatePending, audit.StateDurable)
	}
	uncertain := &audit.Failure{Code: "COMMIT_UNKNOWN", Action: audit.ActionReplaySameRequest}
	m.Call(&audit.Record{Call: &audit.Call{Server: "thegram-birth", Tool: "gram_create", Time: t0}, Outcome: audit.OutcomeToolError, Tool: "gram_create", Failure: uncertain})
	// Another tool of the same server, first counted between two scrapes
	// of the first one's.
	prom.scrape()
	m.Call(&audit.Record{Call: &audit.Call{Server: "thegram-birth", Tool: "gram_read", Time: t0}, Outcome: audit.OutcomeOK, Tool: "gram_read"})
	prom.scrape()
	patch(audit.StateDurable)
	patch(audit.StateDurable, audit.StateDoubleApplied)
	prom.scrape()
	prom.scrape()

	f := func(key string, want float64) {
		t.Helper()
		if got := prom.increase[key]; got != want {
			t.Errorf("increase of %s = %v, want %v", key, got, want)
		}
	}
	f("mcpaudit_writes_total{server=thegram-birth,state=durable,tool=gram_patch}", 22)
	f("mcpaudit_writes_total{server=thegram-birth,state=double_applied,tool=gram_patch}", 1)
	f("mcpaudit_tool_calls_total{outcome=ok,server=thegram-birth,tool=gram_patch}", 22)
	f("mcpaudit_tool_calls_total{outcome=tool_error,server=thegram-birth,tool=gram_create}", 1)
	f("mcpaudit_call_failures_total{code=COMMIT_UNKNOWN,retry_action=replay_same_request,server=thegram-birth,tool=gram_create}", 1)
	f("mcpaudit_tool_calls_total{outcome=ok,server=thegram-birth,tool=gram_read}", 1)
}

// TestMetrics_FirstScrapeWait: held counts are released after
// FirstScrapeWait when nobody scrapes, so that a counter never lags for
// ever; a Gather of the registry itself (the web page's status line) is
// not a scrape and releases nothing.
func TestMetrics_FirstScrapeWait(t *testing.T) {
	m, reg := newMetrics(t, metrics.Options{FirstScrapeWait: 300 * time.Millisecond})
	m.Write(&audit.Write{Server: "quiet", Tool: "gram_patch", Time: t0, StateTime: t0, State: audit.StateDurable}, "")
	durable := map[string]string{"server": "quiet", "tool": "gram_patch", "state": "durable"}
	if v := testutil.ToFloat64(counterOf(t, reg, metrics.WritesTotal, durable)); v != 0 {
		t.Fatalf("durable = %v before any scrape or the wait, want 0 (held)", v)
	}
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(counterOf(t, reg, metrics.WritesTotal, durable)) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the held write is not counted 10 s after a wait of 300ms")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMetrics_FirstScrapeOff: without FirstScrapeWait counts show at once,
// as analyze's one-shot metrics file needs.
func TestMetrics_FirstScrapeOff(t *testing.T) {
	m, reg := newMetrics(t, metrics.Options{})
	m.Write(&audit.Write{Server: "quiet", Tool: "gram_patch", Time: t0, StateTime: t0, State: audit.StateDurable}, "")
	if v := testutil.ToFloat64(counterOf(t, reg, metrics.WritesTotal, map[string]string{"state": "durable"})); v != 1 {
		t.Fatalf("durable = %v, want 1", v)
	}
}

// TestMetrics_Sources: the sources declared up front are at zero before
// their first record, so that a scrape already running sees the first
// batch as an increase; a source not declared is born with its first
// batch in it, invisible to rate().
func TestMetrics_Sources(t *testing.T) {
	m, reg := newMetrics(t, metrics.Options{Sources: []metrics.Source{metrics.SourceCallsHTTP}})
	prom := newPromCounters(t, reg)
	prom.scrape()
	m.IngestAccepted(metrics.SourceCallsHTTP, 20)
	m.IngestRejected(metrics.SourceCallsHTTP, metrics.RejectInvalidJSON, 1)
	m.IngestAccepted(metrics.SourceOTLPHTTP, 20)
	prom.scrape()
	f := func(key string, want float64) {
		t.Helper()
		if got := prom.increase[key]; got != want {
			t.Errorf("increase of %s = %v, want %v", key, got, want)
		}
	}
	f("mcpaudit_ingest_records_total{result=accepted,source=calls_http}", 20)
	f("mcpaudit_ingest_records_total{result=rejected,source=calls_http}", 1)
	f("mcpaudit_ingest_rejected_total{reason=invalid_json,source=calls_http}", 1)
	f("mcpaudit_ingest_records_total{result=accepted,source=otlp_http}", 0)
}
