package main

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// findCountConfig writes the config file of the findings counter tests:
// liveConfig's windows, commits every 50 ms, a short restart grace; serve
// adds keys under serve (the store).
func findCountConfig(t *testing.T, cfg Config, serve ...string) string {
	t.Helper()
	config := filepath.Join(t.TempDir(), "mcpaudit.yaml")
	more := ""
	for _, l := range serve {
		more += "  " + l + "\n"
	}
	if err := os.WriteFile(config, []byte(fmt.Sprintf("detect:\n  verify_window: %s\n  idle_timeout: %s\n  allowed_lateness: %s\nserve:\n  pipeline:\n    commit_every: 50ms\n    restart_grace: 1s\n%s",
		cfg.Detect.VerifyWindow, cfg.Detect.IdleTimeout, cfg.Detect.AllowedLateness, more)), 0o644); err != nil {
		t.Fatal(err)
	}
	return config
}

// findingCounters scrapes serve's /metrics at addr (a scrape: it may
// release held counts) and returns every series of mcpaudit_findings_total
// and mcpaudit_findings_withdrawn_total, by "name{server,kind,severity}".
func findingCounters(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, name := range []string{metrics.FindingsTotal, metrics.FindingsWithdrawnTotal} {
		for _, m := range mfs[name].GetMetric() {
			lv := map[string]string{}
			for _, l := range m.GetLabel() {
				lv[l.GetName()] = l.GetValue()
			}
			out[fmt.Sprintf("%s{%s,%s,%s}", name, lv[metrics.LabelServer], lv[metrics.LabelKind], lv[metrics.LabelSeverity])] = m.GetCounter().GetValue()
		}
	}
	return out
}

// standing returns, by "server/kind", findings_total less
// findings_withdrawn_total of the counters.
func standing(c map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range c {
		name, labels, _ := strings.Cut(strings.TrimSuffix(k, "}"), "{")
		parts := strings.Split(labels, ",")
		key := parts[0] + "/" + parts[1]
		if name == metrics.FindingsWithdrawnTotal {
			v = -v
		}
		out[key] += v
	}
	maps.DeleteFunc(out, func(_ string, v float64) bool { return v == 0 })
	return out
}

// byServerKind counts findings by "server/kind".
func byServerKind(fs []audit.Finding) map[string]float64 {
	out := map[string]float64{}
	for _, f := range fs {
		out[f.Server+"/"+string(f.Kind)]++
	}
	return out
}

// waitCounted scrapes until the findings counters, less the withdrawn,
// count what the API lists by server and kind (a new server's first counts
// wait for a scrape to show its series at zero, then for a save of the
// state file), and returns the counters then.
func waitCounted(t *testing.T, addr string, want map[string]float64, what string) map[string]float64 {
	t.Helper()
	var got map[string]float64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		got = findingCounters(t, addr)
		if maps.Equal(standing(got), want) {
			return got
		}
	}
	t.Fatalf("%s: the findings counters (less the withdrawn) count %v by server and kind, the API lists %v", what, standing(got), want)
	return nil
}

// notBelow fails for every series of before that after lacks or holds at
// less: Prometheus would read a reset, and increase() count it all again.
func notBelow(t *testing.T, what string, before, after map[string]float64) {
	t.Helper()
	keys := slices.Sorted(maps.Keys(before))
	for _, k := range keys {
		if v, ok := after[k]; !ok || v < before[k] {
			t.Errorf("%s: %s went from %v to %v (present %v)", what, k, before[k], v, ok)
		}
	}
}

// TestServe_FindingCountedAcrossKill9: findings made, committed and
// counted just before serve is killed (SIGKILL), with no scrape of
// /metrics before, are counted by the restarted serve: every server and
// kind the store holds has its mcpaudit_findings_total series, at the
// number of findings the API lists. Before alrt48 the dying process had
// counted them, no scrape saw it, and the restart, finding them stored,
// counted them no more: out47 saw 9 of 79 server and kind pairs of the
// immediate finding alerts never fire so.
func TestServe_FindingCountedAcrossKill9(t *testing.T) { findingCountedAcrossKill9(t) }

// TestServe_FindingCountedAcrossKill9ClickHouse is
// TestServe_FindingCountedAcrossKill9 on the ClickHouse store, whose
// state file is the same partitions.json.
func TestServe_FindingCountedAcrossKill9ClickHouse(t *testing.T) {
	dsn := clickhouseDSN(t)
	findingCountedAcrossKill9(t, "store: clickhouse", "clickhouse:", "  dsn: "+dsn,
		fmt.Sprintf("  database: mcpaudit_findcount_%d", time.Now().UnixNano()), "  batch_age: 50ms")
}

// findingCountedAcrossKill9 is TestServe_FindingCountedAcrossKill9 with
// serve's config keys serve.
func findingCountedAcrossKill9(t *testing.T, serve ...string) {
	dir := t.TempDir()
	cfg := liveConfig(t)
	config := findCountConfig(t, cfg, serve...)
	recs := liveCaptureOf(t, 48, 200)
	want := analyzeFindings(t, cfg, ndjson(recs))
	if len(want) < 10 {
		t.Fatalf("the capture gives %d findings", len(want))
	}
	ingest, apiAddr := freePort(t), freePort(t)
	s := &server{apiAddr: apiAddr}
	c := startChild(t, dir, config, ingest, apiAddr)
	defer func() { c.kill() }()
	for i := 0; i < len(recs); i += 100 {
		postAs(t, ingest, "poster", ndjson(recs[i:min(i+100, len(recs))]))
	}
	// The first findings stored: killed at once, /metrics never scraped.
	var before []audit.Finding
	for deadline := time.Now().Add(30 * time.Second); len(before) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no finding stored within 30 s")
		}
		before = apiFindings(t, s, "")
	}
	c.kill()
	t.Logf("killed with %d findings stored (%v)", len(before), byServerKind(before))

	c = startChild(t, dir, config, ingest, apiAddr)
	got := waitJudged(t, s, want, false)
	diffFindings(t, "after the kill", want, got)
	counters := waitCounted(t, apiAddr, byServerKind(got), "after the kill")
	for _, f := range before {
		k := fmt.Sprintf("%s{%s,%s,%s}", metrics.FindingsTotal, f.Server, f.Kind, f.Severity)
		if counters[k] < 1 {
			t.Errorf("%s is %v after the restart: the finding %s stored before the kill is not counted", k, counters[k], f.ID())
		}
	}
}

// TestServe_FindingCountersNeverGoBack: across a clean stop (SIGTERM) and
// a crash (SIGKILL) the findings counters of serve go on from where they
// stood: every series a scrape showed before is there after the restart,
// at least at that value (Prometheus reads less as a reset, and increase()
// counts the whole value again: an alert storm), and once everything is
// judged the counters, less the withdrawn, count the findings the API
// lists. Before alrt48 every restart started them at 0.
func TestServe_FindingCountersNeverGoBack(t *testing.T) {
	dir := t.TempDir()
	cfg := liveConfig(t)
	config := findCountConfig(t, cfg)
	first := liveCaptureOf(t, 49, 120)
	// The second capture goes to servers of their own (new partitions):
	// the first's were moved on with the wall clock past its time.
	second := liveCaptureOf(t, 50, 120)
	for _, r := range second {
		r["server"] = r["server"].(string) + "-b"
	}
	wantFirst := analyzeFindings(t, cfg, ndjson(first))
	// Each capture on its own timeline, as serve judges each server's.
	wantAll := sortFindings(append(slices.Clone(wantFirst), analyzeFindings(t, cfg, ndjson(second))...))
	if len(wantFirst) < 5 || len(wantAll) <= len(wantFirst) {
		t.Fatalf("the captures give %d and %d findings", len(wantFirst), len(wantAll))
	}
	ingest, apiAddr := freePort(t), freePort(t)
	s := &server{apiAddr: apiAddr}
	c := startChild(t, dir, config, ingest, apiAddr)
	defer func() { c.kill() }()
	for i := 0; i < len(first); i += 100 {
		postAs(t, ingest, "poster", ndjson(first[i:min(i+100, len(first))]))
	}
	diffFindings(t, "first capture", wantFirst, waitJudged(t, s, wantFirst, false))
	seen := waitCounted(t, apiAddr, byServerKind(wantFirst), "first capture")

	// A clean stop.
	c.cmd.Process.Signal(syscall.SIGTERM)
	c.cmd.Wait()
	c = startChild(t, dir, config, ingest, apiAddr)
	after := findingCounters(t, apiAddr)
	notBelow(t, "after a clean stop", seen, after)
	if !maps.Equal(after, seen) {
		t.Errorf("after a clean stop, with no new call, the counters are %v, want those before it: %v", after, seen)
	}

	// A crash right after a scrape, while the second capture is judged.
	for i := 0; i < len(second); i += 100 {
		postAs(t, ingest, "poster", ndjson(second[i:min(i+100, len(second))]))
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no finding of the second capture stored within 30 s")
		}
		if len(apiFindings(t, s, "")) > len(wantFirst) {
			break
		}
	}
	for range 3 {
		// Scrapes show the second servers' series at zero, release their
		// first counts, then show them once saved.
		time.Sleep(300 * time.Millisecond)
		for k, v := range findingCounters(t, apiAddr) {
			seen[k] = max(seen[k], v)
		}
	}
	c.kill()
	c = startChild(t, dir, config, ingest, apiAddr)
	notBelow(t, "after a crash", seen, findingCounters(t, apiAddr))

	diffFindings(t, "both captures", wantAll, waitJudged(t, s, wantAll, false))
	final := waitCounted(t, apiAddr, byServerKind(wantAll), "both captures")
	notBelow(t, "once judged after the crash", seen, final)
}
