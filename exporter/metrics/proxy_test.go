package metrics_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

func TestRelay(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.NewRelay(reg, "thegram")
	if err != nil {
		t.Fatal(err)
	}
	m.Request("POST", 200, 3*time.Millisecond)
	m.Request("PATCH", 0, 0)
	m.Record("thegram", audit.OutcomeNoResponse)
	m.Record("thegram", "weird")
	m.Unrecorded("something else")
	m.Forward(metrics.ForwardBuffered, 3)
	m.Post(metrics.PostRetry)
	m.SetBufferBytes(1234)
	m.SetInflight(2)
	var nilRelay *metrics.Relay
	nilRelay.Request("GET", 200, time.Second) // a nil Relay does nothing

	want := `
# HELP mcpaudit_proxy_records_total tools/call exchanges recorded, by outcome.
# TYPE mcpaudit_proxy_records_total counter
mcpaudit_proxy_records_total{outcome="no_response",server="thegram"} 1
mcpaudit_proxy_records_total{outcome="ok",server="thegram"} 0
mcpaudit_proxy_records_total{outcome="other",server="thegram"} 1
mcpaudit_proxy_records_total{outcome="protocol_error",server="thegram"} 0
mcpaudit_proxy_records_total{outcome="tool_error",server="thegram"} 0
# HELP mcpaudit_proxy_requests_total HTTP requests relayed by the proxy, by method and status class.
# TYPE mcpaudit_proxy_requests_total counter
mcpaudit_proxy_requests_total{method="POST",status="2xx"} 1
mcpaudit_proxy_requests_total{method="other",status="error"} 1
# HELP mcpaudit_proxy_unrecorded_total Messages relayed but not recorded, by reason.
# TYPE mcpaudit_proxy_unrecorded_total counter
mcpaudit_proxy_unrecorded_total{reason="invalid_json"} 1
mcpaudit_proxy_unrecorded_total{reason="oversized"} 0
mcpaudit_proxy_unrecorded_total{reason="unpaired"} 0
# HELP mcpaudit_proxy_forward_records_total Call records by what became of them on the way to the collector.
# TYPE mcpaudit_proxy_forward_records_total counter
mcpaudit_proxy_forward_records_total{result="buffered"} 3
mcpaudit_proxy_forward_records_total{result="dropped"} 0
mcpaudit_proxy_forward_records_total{result="rejected"} 0
mcpaudit_proxy_forward_records_total{result="sent"} 0
mcpaudit_proxy_forward_records_total{result="unjournaled"} 0
# HELP mcpaudit_proxy_forward_requests_total POSTs of call records to the collector, by result.
# TYPE mcpaudit_proxy_forward_requests_total counter
mcpaudit_proxy_forward_requests_total{result="ok"} 0
mcpaudit_proxy_forward_requests_total{result="rejected"} 0
mcpaudit_proxy_forward_requests_total{result="retry"} 1
# HELP mcpaudit_proxy_buffer_bytes Bytes of call records buffered on disk for the collector.
# TYPE mcpaudit_proxy_buffer_bytes gauge
mcpaudit_proxy_buffer_bytes 1234
# HELP mcpaudit_proxy_inflight_calls tools/call requests relayed and waiting for their response.
# TYPE mcpaudit_proxy_inflight_calls gauge
mcpaudit_proxy_inflight_calls 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		metrics.ProxyRecordsTotal, metrics.ProxyRequestsTotal, metrics.ProxyUnrecordedTotal, metrics.ProxyForwardRecordsTotal,
		metrics.ProxyForwardRequestsTotal, metrics.ProxyBufferBytes, metrics.ProxyInflightCalls); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, metrics.ProxyUpstreamSeconds); n != 1 {
		t.Fatalf("%d upstream histograms, want 1 (POST)", n)
	}
	// Every family is declared with its type.
	mfs, _ := reg.Gather()
	types := map[string]string{}
	for _, mf := range mfs {
		types[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	for _, f := range metrics.ProxyFamilies {
		if types[f.Name] != f.Type {
			t.Errorf("family %s: %q gathered, %q declared", f.Name, types[f.Name], f.Type)
		}
	}
}

// TestRelayDocs keeps docs/metrics.md listing every relay metric, label and value.
func TestRelayDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	var want []string
	for _, f := range metrics.ProxyFamilies {
		want = append(want, f.Name)
		want = append(want, f.Labels...)
	}
	want = append(want, metrics.UnrecordedReasons...)
	want = append(want, metrics.ForwardResults...)
	want = append(want, metrics.PostResults...)
	for _, w := range want {
		if !strings.Contains(doc, "`"+w+"`") {
			t.Errorf("docs/metrics.md does not mention `%s`", w)
		}
	}
}
