package main

import (
	"bufio"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestServe_FindingLatency: live calls that complete a double apply and
// leave a write unverified; the latency of both findings is observed at
// their commit, one as waiting for its evidence and one for its window.
// The figures themselves are measured by loadgen, not asserted here.
func TestServe_FindingLatency(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Detect.VerifyWindow = 2 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := startTest(t, cfg)

	var recs []map[string]any
	for _, name := range []string{"thegram-commit-unknown-abandoned", "thegram-both-succeeded-double-apply"} {
		f, err := os.Open("../../testdata/examples/" + name + ".ndjson")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r map[string]any
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			if r["session"] != "s-tail" { // the examples' clock-advancing tail
				recs = append(recs, r)
			}
		}
		f.Close()
	}
	// Now, in their order, 100 ms apart.
	now := time.Now()
	for i, r := range recs {
		r["time"] = now.Add(time.Duration(i-len(recs)) * 100 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	}
	if resp := postCalls(t, s, ndjson(recs), false); resp.StatusCode != http.StatusOK {
		t.Fatalf("post: %s", resp.Status)
	}
	var kinds []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && len(kinds) < 2; time.Sleep(100 * time.Millisecond) {
		kinds = kinds[:0]
		for _, f := range apiFindings(t, s, "") {
			kinds = append(kinds, string(f.Kind))
		}
	}
	if strings.Join(kinds, ",") != string(audit.KindUnverifiedWrite)+","+string(audit.KindDoubleAppliedWrite) &&
		strings.Join(kinds, ",") != string(audit.KindDoubleAppliedWrite)+","+string(audit.KindUnverifiedWrite) {
		t.Fatalf("findings %v, want one unverified and one double-applied write", kinds)
	}

	resp, err := http.Get("http://" + s.apiAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	mf := mfs[metrics.FindingLatencySeconds]
	if mf == nil {
		t.Fatalf("no %s", metrics.FindingLatencySeconds)
	}
	got := map[string]uint64{}
	for _, m := range mf.Metric {
		h := m.GetHistogram()
		if sum := h.GetSampleSum(); math.IsNaN(sum) || math.IsInf(sum, 0) || sum < 0 {
			t.Errorf("%v: sum %v", m.Label, sum)
		}
		for _, l := range m.Label {
			if l.GetName() == metrics.LabelWait {
				got[l.GetValue()] = h.GetSampleCount()
			}
		}
	}
	if got[metrics.WaitEvidence] != 1 || got[metrics.WaitWindow] != 1 {
		t.Fatalf("observed %v, want one finding waiting for its evidence and one for its window", got)
	}
}
