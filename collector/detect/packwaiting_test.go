package detect_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// TestPackWaiting judges lean records as the live service does, with one
// server's exporter ten minutes behind (its partition's calls wait), and
// second observations that complete waiting ones with their response, and
// expects the same findings, write states and counts whether the waiting
// calls are kept packed or not.
func TestPackWaiting(t *testing.T) {
	cfg := detect.NewDefaultConfig()
	for _, seed := range []int64{21, 22} {
		c := capgen.Generate(capgen.Config{Seed: seed, Sessions: 1200, Span: 20 * time.Minute, AnomalyRate: 0.35, NoiseRate: 0.02})
		recs := readRecords(t, c.Lines)
		deliveries := func() []delivered {
			var ds []delivered
			taken := map[string]bool{}
			for _, r := range recs {
				l := r.Lean()
				lag := time.Second
				if strings.HasPrefix(l.Call.Server, "oddlynew") {
					lag = 10 * time.Minute
				}
				src := l.Call.Server
				if taken[l.Call.Fingerprint] {
					// A second observer, later: it may complete the
					// first observation while it waits.
					src, lag = "proxy-"+src, lag+5*time.Second
				}
				taken[l.Call.Fingerprint] = true
				ds = append(ds, delivered{l, src, endOf(l).Add(lag)})
			}
			return ds
		}
		want := live(cfg, deliveries())
		got := live(cfg, deliveries(), (*detect.Engine).PackWaiting)
		if len(want.findings) < 100 {
			t.Fatalf("seed %d: only %d findings", seed, len(want.findings))
		}
		compare(t, "packed", want, got)
		if !reflect.DeepEqual(want.findings, got.findings) {
			t.Errorf("seed %d: the findings differ in their texts", seed)
		}
		if want.stats.Duplicates == 0 || !reflect.DeepEqual(want.stats, got.stats) {
			t.Errorf("seed %d: stats\n got %+v\nwant %+v", seed, got.stats, want.stats)
		}
	}
}

var _ audit.Sink = outcomeSink{}
