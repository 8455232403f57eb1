package main

import (
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// waitReadyz waits until serve at addr answers /readyz with 200.
func waitReadyz(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Fatalf("serve at %s not ready within 60 s", addr)
}

// TestBackupRestore_CountersGoOn: a backup taken from a running serve
// (a real child process) and restored into another data dir gives a serve
// whose counters go on from what Prometheus last scraped from the one
// backed up (no reset) and count each judged call once (the values one run
// judging the calls counts, no replayed call counted again), and whose
// findings are those of the calls. Before debt52 the backup left out the
// state file and the journal of its counters: the restored serve began them
// at 0 (Prometheus read a reset) and judged every stored call again.
func TestBackupRestore_CountersGoOn(t *testing.T) {
	dir := t.TempDir()
	cfg := liveConfig(t)
	config := findCountConfig(t, cfg)
	calls := liveCaptureOf(t, 53, 120)
	want := analyzeRatioCounts(t, cfg, ndjson(calls))
	findings := analyzeFindings(t, cfg, ndjson(calls))

	ingest, apiAddr := freePort(t), freePort(t)
	c := startChild(t, dir, config, ingest, apiAddr)
	defer func() { c.kill() }()
	for i := 0; i < len(calls); i += 100 {
		postAs(t, ingest, "poster", ndjson(calls[i:min(i+100, len(calls))]))
	}
	waitJudged(t, &server{apiAddr: apiAddr}, findings, false)
	seen := waitRatioCounts(t, apiAddr, want, "before the backup")

	out := filepath.Join(t.TempDir(), "backup.db")
	if code, stdout, stderr := cliRun("backup", "--data-dir", dir, "--out", out); code != 0 {
		t.Fatalf("backup while serve runs: exit %d: %s%s", code, stdout, stderr)
	} else if !strings.Contains(stdout, "the state file and its counters") {
		t.Errorf("backup does not say it copied the state file and its counters:\n%s", stdout)
	}
	c.kill()

	restored := t.TempDir()
	code, stdout, stderr := cliRun("restore", "--data-dir", restored, "--from", out)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s%s", code, stdout, stderr)
	}
	for _, name := range []string{stateFile, "partitions.counts.a"} {
		if _, err := os.Stat(filepath.Join(restored, name)); err != nil {
			t.Errorf("restore did not put %s in place: %v\n%s", name, err, stdout)
		}
	}
	ingest, apiAddr = freePort(t), freePort(t)
	c = startChild(t, restored, config, ingest, apiAddr)
	waitReadyz(t, apiAddr)
	after := scrapeRatioCounts(t, apiAddr)
	for k, v := range seen {
		if after[k] < v {
			t.Errorf("restored: %s went from %v to %v (Prometheus reads a reset, and increase() counts the whole value again)", k, v, after[k])
		}
	}
	waitJudged(t, &server{apiAddr: apiAddr}, findings, false)
	if got := waitRatioCounts(t, apiAddr, want, "restored"); !maps.Equal(got, seen) {
		t.Errorf("restored: the counters differ from what the serve backed up counted:\n%s", ratioDiff(seen, got))
	}
}
