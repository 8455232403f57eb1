package sqlite

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestAckLog_ReadyGauge: mcpaudit_store_ready follows the check /readyz
// answers from. While the drain of the call log fails (set as the drain
// sets it, as in TestAckLog_Ready) the store is not ready and the gauge is
// 0; once the drain goes on, 1 again. Before, no metric showed it (found
// from outside by live20: /readyz 503 for 69 s of a ClickHouse outage,
// nothing for Prometheus to alert on).
func TestAckLog_ReadyGauge(t *testing.T) {
	s := openTemp(t, Options{Ack: AckLog})
	defer s.Close()
	reg := prometheus.NewRegistry()
	if err := metrics.WatchReady(reg, s); err != nil {
		t.Fatal(err)
	}
	want := func(v int) {
		t.Helper()
		exp := fmt.Sprintf("# HELP %[1]s %[2]s\n# TYPE %[1]s gauge\n%[1]s %[3]d\n",
			metrics.StoreReady, helpOf(t, metrics.StoreReady), v)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), metrics.StoreReady); err != nil {
			t.Error(err)
		}
	}
	want(1)
	s.clog.gate.Lock()
	if _, err := s.AppendCalls(t.Context(), records(t, 10)); err != nil {
		t.Fatal(err)
	}
	s.signalProgress(fmt.Errorf("cannot apply the call log: %w", audit.ErrUnavailable))
	if err := metrics.CheckReady(t.Context(), s); err == nil {
		t.Error("CheckReady with the drain failing = nil, want the reason")
	}
	want(0)
	s.clog.gate.Unlock()
	if err := s.caughtUp(t.Context(), "test"); err != nil {
		t.Fatal(err)
	}
	want(1)
	s.Close()
	want(0)
}

func helpOf(t *testing.T, name string) string {
	t.Helper()
	for _, f := range metrics.Families {
		if f.Name == name {
			return f.Help
		}
	}
	t.Fatalf("no family %s", name)
	return ""
}

// BenchmarkCheckReady is what mcpaudit_store_ready costs a scrape of the
// embedded store (ack log): its Ready, then one read of the watermark.
func BenchmarkCheckReady(b *testing.B) {
	s := openTemp(b, Options{Ack: AckLog})
	defer s.Close()
	for b.Loop() {
		if err := metrics.CheckReady(b.Context(), s); err != nil {
			b.Fatal(err)
		}
	}
}
