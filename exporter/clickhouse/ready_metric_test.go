package clickhouse

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestOutage_ReadyGauge stops the real server while calls flow into the
// spool (ack "log", serve's default) and starts it again:
// mcpaudit_store_ready is 1 before, 0 during the outage (as /readyz
// answers 503), and 1 again once the spool has drained. Before, no metric
// showed the outage: live20 killed ClickHouse for 69 s under 250 calls/s
// and only the spool's bytes moved, two hours from any alert.
func TestOutage_ReadyGauge(t *testing.T) {
	dsn, ctl := privateServer(t)
	o := testOptions(t)
	o.DSN = dsn
	o.Ack = AckLog
	s := openStore(t, o)
	reg := prometheus.NewRegistry()
	if err := metrics.WatchReady(reg, s); err != nil {
		t.Fatal(err)
	}
	waitReady(t, s, 30*time.Second)
	if v := readyGauge(t, reg); v != 1 {
		t.Fatalf("%s = %v with the server up, want 1", metrics.StoreReady, v)
	}
	stop := startTraffic(t, s, 200)
	time.Sleep(500 * time.Millisecond)
	ctl("stop")
	// Polled, not timed: the store notices the outage at its next insert
	// or ping (every 5 s).
	for deadline := time.Now().Add(30 * time.Second); readyGauge(t, reg) != 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if v := readyGauge(t, reg); v != 0 {
		t.Errorf("%s = %v with the server stopped, want 0 (Ready: %v)", metrics.StoreReady, v, s.Ready())
	}
	ctl("start")
	time.Sleep(time.Second)
	acked := stop()
	waitReady(t, s, 2*time.Minute)
	if v := readyGauge(t, reg); v != 1 {
		t.Errorf("%s = %v once the spool drained, want 1", metrics.StoreReady, v)
	}
	checkAcked(t, s, o, acked)
}

// readyGauge gathers reg and returns the value of metrics.StoreReady.
func readyGauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == metrics.StoreReady && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s gathered", metrics.StoreReady)
	return 0
}
