package receiver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// rejectedCount reads mcpaudit_ingest_rejected_total for a reason and
// source.
func (e *env) rejectedCount(t *testing.T, reason metrics.RejectReason, src metrics.Source) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metrics.IngestRejectedTotal {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels[metrics.LabelReason] == string(reason) && labels[metrics.LabelSource] == string(src) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestRejectReasons: back-pressure for a tenant past its share of the open
// calls, and a store that refuses calls, are counted under reasons of their
// own, not as a full queue: the operator's next step differs.
func TestRejectReasons(t *testing.T) {
	t.Run("tenant_share", func(t *testing.T) {
		e := newEnv(t, func(_ *receiver.Config, p *pipeline.Config) { p.MaxOpenCalls = 60 })
		// Every call at one time: the partition's watermark stays a
		// lateness behind it, so they all stay open.
		at := now.Add(-time.Hour)
		rpc := 0
		calls := func(n int) []byte {
			var lines []string
			for range n {
				rpc++
				lines = append(lines, record("thegram", "gram_read", at, rpc))
			}
			return []byte(strings.Join(lines, "\n") + "\n")
		}
		if a := e.post(t, "/v1/calls", "application/x-ndjson", tokGlobex, calls(1)); a.status != 200 {
			t.Fatalf("globex: %d %s", a.status, a.body)
		}
		for i := range 3 {
			if a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, calls(10)); a.status != 200 {
				t.Fatalf("acme's batch %d: %d %s", i, a.status, a.body)
			}
		}
		a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, calls(10))
		if a.status != 429 || !strings.Contains(a.body, `tenant "acme"`) || a.header.Get("Retry-After") == "" {
			t.Fatalf("acme past its share: %d %q; want 429 naming the tenant, with Retry-After", a.status, a.body)
		}
		if n := e.rejectedCount(t, metrics.RejectTenantShare, metrics.SourceCallsHTTP); n != 10 {
			t.Errorf("%v calls counted as tenant_share, want 10", n)
		}
		if n := e.rejectedCount(t, metrics.RejectQueueFull, metrics.SourceCallsHTTP); n != 0 {
			t.Errorf("%v calls counted as queue_full, want 0", n)
		}
	})
	t.Run("store_unavailable", func(t *testing.T) {
		e := newEnv(t, nil)
		e.store.Close()
		a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(record("thegram", "gram_read", now, 1)+"\n"))
		if a.status != 503 || a.header.Get("Retry-After") == "" {
			t.Fatalf("store closed: %d %q; want 503 with Retry-After", a.status, a.body)
		}
		if n := e.rejectedCount(t, metrics.RejectStoreDown, metrics.SourceCallsHTTP); n != 1 {
			t.Errorf("%v calls counted as store_unavailable, want 1", n)
		}
	})
}
