package docs_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcpaudit/mcpaudit/dashboards"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/rules"
	"github.com/mcpaudit/mcpaudit/rules/promtest"
)

// readmeScrapeConfig returns the README's example prometheus.yml: the YAML
// block that scrapes the job of the rules.
func readmeScrapeConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(b), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if !strings.Contains(block, "scrape_configs:") {
			continue
		}
		// The block sits in a list item: take its indentation off.
		var out strings.Builder
		for _, line := range strings.Split(block, "\n") {
			out.WriteString(strings.TrimPrefix(line, "  ") + "\n")
		}
		return out.String()
	}
	t.Fatal("README.md has no prometheus.yml example (a yaml block with scrape_configs)")
	return ""
}

// TestReadme_ScrapeConfig: the README's minimal prometheus.yml passes
// promtool check config with the committed rules beside it, names the
// rules' job, and a real Prometheus run from it (its target moved to a
// test exporter) scrapes the target up and loads the rules.
func TestReadme_ScrapeConfig(t *testing.T) {
	conf := readmeScrapeConfig(t)
	if !strings.Contains(conf, "job_name: "+rules.DefaultOptions().Job+" ") {
		t.Errorf("the README's scrape job is not the rules' job %q:\n%s", rules.DefaultOptions().Job, conf)
	}
	dir := t.TempDir()
	ruleFile, err := os.ReadFile("../deploy/prometheus/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), ruleFile, 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(conf string) string {
		p := filepath.Join(dir, "prometheus.yml")
		if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	promtool := promtest.Binary(t, "promtool")
	if out, err := exec.Command(promtool, "check", "config", write(conf)).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s\n%s", err, out, conf)
	}

	// The relays dashboard and the relay alerts read the relays' own job
	// (op23 D8: the README's config had none).
	if !strings.Contains(conf, "job_name: "+dashboards.DefaultRelayJob+" ") {
		t.Errorf("the README's config has no scrape job %q for the relays' --metrics-listen:\n%s", dashboards.DefaultRelayJob, conf)
	}

	// A real Prometheus from it, scraping a test exporter of the metrics
	// registry instead of 127.0.0.1:9464 and one of a relay's instead of
	// 127.0.0.1:9465, every second.
	exp := httptest.NewServer(promhttp.HandlerFor(metrics.NewRegistry(), promhttp.HandlerOpts{}))
	defer exp.Close()
	relayReg := prometheus.NewRegistry()
	if _, err := metrics.NewRelay(relayReg, "thegram"); err != nil {
		t.Fatal(err)
	}
	relay := httptest.NewServer(promhttp.HandlerFor(relayReg, promhttp.HandlerOpts{}))
	defer relay.Close()
	if !strings.Contains(conf, `"127.0.0.1:9464"`) || !strings.Contains(conf, `"127.0.0.1:9465"`) || !strings.Contains(conf, "scrape_interval: 15s") {
		t.Fatalf("the README's targets or interval changed; update this test:\n%s", conf)
	}
	run := strings.ReplaceAll(conf, `"127.0.0.1:9464"`, `"`+strings.TrimPrefix(exp.URL, "http://")+`"`)
	run = strings.ReplaceAll(run, `"127.0.0.1:9465"`, `"`+strings.TrimPrefix(relay.URL, "http://")+`"`)
	run = strings.ReplaceAll(run, "interval: 15s", "interval: 1s")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var log strings.Builder
	cmd := exec.Command(promtest.Binary(t, "prometheus"), "--config.file="+write(run),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	}()
	get := func(path string, v any) error {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(v)
	}
	var up, relayUp bool
	var groups int
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && !(up && relayUp && groups > 0) {
		time.Sleep(200 * time.Millisecond)
		var targets struct {
			Data struct {
				ActiveTargets []struct {
					Labels    map[string]string
					Health    string
					ScrapeURL string
				}
			}
		}
		if get("/api/v1/targets", &targets) == nil {
			for _, tg := range targets.Data.ActiveTargets {
				up = up || tg.Labels["job"] == rules.DefaultOptions().Job && tg.Health == "up" && strings.HasSuffix(tg.ScrapeURL, "/metrics")
				relayUp = relayUp || tg.Labels["job"] == dashboards.DefaultRelayJob && tg.Health == "up" && strings.HasSuffix(tg.ScrapeURL, "/metrics")
			}
		}
		var rs struct {
			Data struct{ Groups []json.RawMessage }
		}
		if get("/api/v1/rules", &rs) == nil {
			groups = len(rs.Data.Groups)
		}
	}
	if !up || !relayUp || groups == 0 {
		t.Errorf("Prometheus from the README's config: target up %v, relay target up %v, rule groups %d; want both up and the rules loaded", up, relayUp, groups)
	}
}
