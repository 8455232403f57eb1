package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestServe_RestartsWithoutCalls posts a capture to serve, waits until its
// findings are analyze's (the windows of the partition left quiet closed
// on the wall clock) and its watermarks have moved on with the wall clock
// past the last calls, then restarts it on the same data four times,
// SIGTERM and SIGKILL in turn, with no new call. Each serve must hold
// the same findings (ids and bodies), announce none again
// (mcpaudit_findings_total goes on at the findings stored: alrt48), count
// no call or write state again (mcpaudit_tool_calls_total,
// mcpaudit_writes_total go on at what they counted: rcn49; before, they
// started at 0 and counted nothing again) and start each partition's
// watermark where it stood, not back at the partition's last call.
func TestServe_RestartsWithoutCalls(t *testing.T) {
	t.Parallel() // serve children on a data dir and ports of their own
	dir := t.TempDir()
	cfg := liveConfig(t)
	cfg.Detect.AllowedLateness = 5 * time.Second
	cfg.Detect.MaxClockSkew = 2 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "mcpaudit.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("detect:\n  verify_window: %s\n  idle_timeout: %s\n  allowed_lateness: %s\n  max_clock_skew: %s\nserve:\n  pipeline:\n    commit_every: 50ms\n    restart_grace: 1s\n",
		cfg.Detect.VerifyWindow, cfg.Detect.IdleTimeout, cfg.Detect.AllowedLateness, cfg.Detect.MaxClockSkew)), 0o644); err != nil {
		t.Fatal(err)
	}
	recs := liveCaptureOf(t, 31, 300)
	want := analyzeFindings(t, cfg, ndjson(recs))
	if len(want) < 20 {
		t.Fatalf("the capture gives %d findings", len(want))
	}
	last := map[string]time.Time{}
	for _, r := range recs {
		if s := r["server"].(string); recTime(r).After(last[s]) {
			last[s] = recTime(r)
		}
	}
	ingest, apiAddr := freePort(t), freePort(t)
	s := &server{apiAddr: apiAddr}
	c := startChild(t, dir, config, ingest, apiAddr)
	defer func() { c.kill() }()
	for i := 0; i < len(recs); i += 100 {
		postAs(t, ingest, "poster", ndjson(recs[i:min(i+100, len(recs))]))
	}
	got := waitJudged(t, s, want, false)
	diffFindings(t, "before the restarts", want, got)
	// Past the lateness allowance of the last calls, no restart may announce
	// their write states again.
	waitStatus(t, s, func(st api.StatusResponse) bool {
		for _, p := range st.Partitions {
			if p.Watermark == nil || p.Watermark.Before(last[p.Server].Add(cfg.Detect.AllowedLateness+cfg.Detect.Lateness+time.Second)) {
				return false
			}
		}
		return len(st.Partitions) == len(last)
	})
	before := watermarks(t, s)
	stored := findingBodies(t, s)
	// The calls and write states go on from the values the state file
	// saved (rcn49), as the findings do: what one run judging the
	// capture counts.
	counted := waitRatioCounts(t, apiAddr, analyzeRatioCounts(t, cfg, ndjson(recs)), "before the restarts")

	for i, sig := range []os.Signal{syscall.SIGTERM, os.Kill, syscall.SIGTERM, os.Kill} {
		if sig == os.Kill {
			c.kill()
		} else {
			c.cmd.Process.Signal(sig)
			c.cmd.Wait()
		}
		c = startChild(t, dir, config, ingest, apiAddr)
		// Past a new partition's hold (2 s), the replay judged, a commit
		// or two made and the state file saved (at most once a second).
		time.Sleep(3 * time.Second)
		// After SIGKILL the state file may be a save behind (it is
		// rewritten at most once a second).
		var slack time.Duration
		if sig == os.Kill {
			slack = 1100 * time.Millisecond
		}
		wms := watermarks(t, s)
		if len(wms) != len(before) {
			t.Errorf("restart %d (after %v): watermarks %v, want one for each of %v", i+1, sig, wms, before)
		}
		for server, wm := range wms {
			if wm.Before(before[server].Add(-slack)) {
				t.Errorf("restart %d (after %v): %s's watermark went back from %s to %s", i+1, sig, server, before[server].Format(time.RFC3339Nano), wm.Format(time.RFC3339Nano))
			}
		}
		if now := findingBodies(t, s); !equalBodies(now, stored) {
			t.Errorf("restart %d (after %v): %d findings stored, %d before; the set or a body changed", i+1, sig, len(now), len(stored))
		}
		if now := scrapeRatioCounts(t, apiAddr); !maps.Equal(now, counted) {
			t.Errorf("restart %d (after %v) with no new call: the calls and write states counted changed:\n%s", i+1, sig, ratioDiff(counted, now))
		}
		// The findings counters go on from the values the state file
		// saved (alrt48): the findings stored, none announced again.
		waitCounted(t, apiAddr, byServerKind(want), fmt.Sprintf("restart %d (after %v) with no new call", i+1, sig))
	}
}

// watermarks reads every partition's watermark from the status API, by
// server.
func watermarks(t *testing.T, s *server) map[string]time.Time {
	t.Helper()
	var st api.StatusResponse
	getJSON(t, "http://"+s.apiAddr+"/api/v1/status", &st)
	m := map[string]time.Time{}
	for _, p := range st.Partitions {
		if p.Watermark != nil {
			m[p.Server] = *p.Watermark
		}
	}
	return m
}

// findingBodies returns every stored finding as the API gives it, by id.
func findingBodies(t *testing.T, s *server) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, f := range apiFindings(t, s, "") {
		b, _ := json.Marshal(f)
		m[f.ID()] = string(b)
	}
	return m
}

func equalBodies(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for id, body := range a {
		if b[id] != body {
			return false
		}
	}
	return true
}

// counterSum adds up every series of the named counter in exposition
// text.
func counterSum(text, name string) float64 {
	var sum float64
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}
