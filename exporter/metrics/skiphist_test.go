package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestSkipCounts_Latencies: a call or a verified write told while
// SkipCounts is set (the replay at start judging again what the run before
// judged and observed) is not observed in the latency histograms, which
// start at 0 with the process: rate() reads the restart as a reset, and
// the replayed calls observed again were counted twice (debt52; before,
// only the counters skipped them). Told after it, they are observed.
func TestSkipCounts_Latencies(t *testing.T) {
	m, err := New(prometheus.NewRegistry(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 7, 14, 0, 0, 0, time.UTC)
	tell := func() {
		m.Call(&audit.Record{Call: &audit.Call{Server: "thegram", Duration: 40 * time.Millisecond}, Tool: "gram_patch", Outcome: audit.OutcomeOK})
		w := &audit.Write{Server: "thegram", Tool: "gram_patch", Time: at, StateTime: at.Add(3 * time.Second), State: audit.StatePending}
		m.Write(w, "")
		w.State = audit.StateDurable
		m.Write(w, audit.StatePending)
	}
	m.SkipCounts(true)
	tell()
	m.SkipCounts(false)
	if got := histCount(t, m.duration.WithLabelValues("thegram", "gram_patch")); got != 0 {
		t.Errorf("with SkipCounts: call latency observed %d times, want 0", got)
	}
	if got := histCount(t, m.verification.WithLabelValues("thegram")); got != 0 {
		t.Errorf("with SkipCounts: verification latency observed %d times, want 0", got)
	}
	tell()
	if got := histCount(t, m.duration.WithLabelValues("thegram", "gram_patch")); got != 1 {
		t.Errorf("after SkipCounts: call latency observed %d times, want 1", got)
	}
	if got := histCount(t, m.verification.WithLabelValues("thegram")); got != 1 {
		t.Errorf("after SkipCounts: verification latency observed %d times, want 1", got)
	}
}

// histCount returns how many times the histogram o was observed.
func histCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	var pb dto.Metric
	if err := o.(prometheus.Metric).Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetHistogram().GetSampleCount()
}
