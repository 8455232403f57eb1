package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// BenchmarkCallWrite counts one call and its write going pending then
// durable, as the engine tells the metrics sink of most write calls.
//
//	go test ./exporter/metrics -run '^$' -bench CallWrite -benchmem
func BenchmarkCallWrite(b *testing.B) {
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	if err != nil {
		b.Fatal(err)
	}
	tools := []string{"gram_read", "gram_patch", "gram_create", "run"}
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tool := tools[i%len(tools)]
		r := &audit.Record{Call: &audit.Call{Server: "thegram", Tool: tool, Duration: 20 * time.Millisecond}, Outcome: audit.OutcomeOK}
		m.Call(r)
		w := &audit.Write{Server: "thegram", Tool: tool, Time: t0, StateTime: t0, State: audit.StatePending}
		m.Write(w, "")
		w.State, w.StateTime = audit.StateDurable, t0.Add(time.Second)
		m.Write(w, audit.StatePending)
		i++
	}
}
