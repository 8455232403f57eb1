package main

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestServe_LastFindingGaugeAfterRestart: after a restart,
// mcpaudit_finding_last_event_timestamp_seconds holds, for each server and
// kind, the event time of the newest finding the store holds, from the
// first scrape, before any new finding. Before op22 it had no series
// until each server's next finding of a kind (op21's D6), so the
// findings dashboard's "Age of the newest finding" was empty and a rule
// reading the gauge saw nothing where the store held findings. serve is
// stopped and started again on the same data dir (a real SQLite file);
// the gauge's values are those analyze's findings give.
func TestServe_LastFindingGaugeAfterRestart(t *testing.T) {
	recs := mergedCapture(t)
	cfg := testConfig(t, t.TempDir())
	want := analyzeFindings(t, cfg, ndjson(recs))
	newest := map[string]float64{}
	for _, f := range want {
		k := f.Server + "/" + string(f.Kind)
		if v := float64(f.Time.UnixNano()) / 1e9; v > newest[k] {
			newest[k] = v
		}
	}
	if len(newest) < 5 {
		t.Fatalf("the capture gives findings of %d server and kind pairs, want more", len(newest))
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s1, err := startServer(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	resp := postCalls(t, s1, ndjson(recs), false)
	resp.Body.Close()
	waitFindings(t, s1, want)
	if got := lastFindingGauge(t, scrapeMetrics(t, s1)); !maps.Equal(got, newest) {
		t.Fatalf("before the restart the gauge is %v, want %v", got, newest)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s1.shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	s2 := startTest(t, cfg)
	text := scrapeMetrics(t, s2)
	if got := lastFindingGauge(t, text); !maps.Equal(got, newest) {
		t.Fatalf("after the restart, with no new call, the gauge is %v, want what the store holds: %v", got, newest)
	}
	// Seeded, not counted: no finding was announced again. The counters
	// go on from the values the state file saved (alrt48).
	if n := counterSum(text, metrics.FindingsTotal); n > float64(len(want)) {
		t.Errorf("after the restart %s counts %v, more than the %d findings", metrics.FindingsTotal, n, len(want))
	}
	waitCounted(t, s2.apiAddr, byServerKind(want), "after the restart")
}

// lastFindingGauge reads the last finding gauge from an exposition, by
// "server/kind".
func lastFindingGauge(t *testing.T, text string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, metrics.FindingLastEventTimestampSeconds+"{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		var server, kind string
		for _, l := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(l, "=")
			v = strings.Trim(v, `"`)
			switch k {
			case metrics.LabelServer:
				server = v
			case metrics.LabelKind:
				kind = v
			}
		}
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("cannot read %q: %v", line, err)
		}
		out[server+"/"+kind] = f
	}
	return out
}
