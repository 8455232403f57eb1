// Package promtest runs a real Prometheus server (and finds promtool) for
// tests: it scrapes any target URL with given rule files, and answers instant
// queries and the alerts API. The end-to-end test of the rules and dashboards
// feeds a metrics registry directly; a test of `mcpaudit serve` can point the
// same server at the service's own /metrics.
//
// A missing binary skips the test with a loud message outside CI and fails it
// when the CI environment variable is set.
package promtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Binary returns the path of the named executable (prometheus, promtool). If
// it is not on PATH the test fails when CI is set and is skipped otherwise.
func Binary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s is not on PATH (install Debian's prometheus package: "+
		"apt-get install -y --no-install-recommends prometheus, or run scripts/test.sh)", name)
	if os.Getenv("CI") != "" {
		t.Fatal("promtest: " + msg)
	}
	t.Skip("\n\n*** SKIPPED: " + msg + " ***\n")
	return ""
}

// Config says what the server scrapes and evaluates.
type Config struct {
	// Target is the URL of the metrics endpoint, e.g. http://127.0.0.1:4567/metrics.
	Target string
	// Job is the job label of the target. Default "mcpaudit".
	Job string
	// RuleFiles are loaded as they are.
	RuleFiles []string
	// Interval is both the scrape and the rule evaluation interval. Default 1s.
	Interval time.Duration
}

// Server is a running Prometheus, killed when the test ends.
type Server struct {
	// URL is the server's base URL, http://127.0.0.1:PORT.
	URL    string
	client *http.Client
	log    *syncBuffer
}

// Start starts Prometheus for cfg on a free port of 127.0.0.1 and waits until
// it is ready (not until its first scrape: use WaitUp).
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	bin := Binary(t, "prometheus")
	if cfg.Job == "" {
		cfg.Job = "mcpaudit"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	target, err := url.Parse(cfg.Target)
	if err != nil || target.Host == "" {
		t.Fatalf("promtest: bad target %q", cfg.Target)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(configYAML(cfg, target)), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	log := &syncBuffer{}
	cmd := exec.Command(bin,
		"--config.file="+conf,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("promtest: cannot start prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	})
	s := &Server{URL: "http://" + addr, client: &http.Client{Timeout: 10 * time.Second}, log: log}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("promtest: prometheus exited at start:\n%s", log.String())
		default:
		}
		resp, err := s.client.Get(s.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("promtest: prometheus not ready after 30s:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func configYAML(cfg Config, target *url.URL) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  evaluation_interval: %s\n", cfg.Interval, cfg.Interval)
	if len(cfg.RuleFiles) > 0 {
		b.WriteString("rule_files:\n")
		for _, f := range cfg.RuleFiles {
			fmt.Fprintf(&b, "  - %q\n", f)
		}
	}
	path := target.Path
	if path == "" {
		path = "/metrics"
	}
	fmt.Fprintf(&b, "scrape_configs:\n  - job_name: %q\n    scheme: %s\n    metrics_path: %q\n    static_configs:\n      - targets: [%q]\n",
		cfg.Job, target.Scheme, path, target.Host)
	return b.String()
}

// freeAddr returns a 127.0.0.1 address whose port was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// Sample is one element of an instant vector, or the value of a scalar.
type Sample struct {
	Metric map[string]string
	Value  string
}

// Result is the answer to an instant query.
type Result struct {
	Type    string // vector, scalar, matrix or string
	Samples []Sample
}

type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Warnings  []string        `json:"warnings"`
}

func (s *Server) get(ctx context.Context, path string, q url.Values) (json.RawMessage, error) {
	u := s.URL + path
	if q != nil {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("cannot decode %s answer (HTTP %d): %w", path, resp.StatusCode, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s: %s", path, r.ErrorType, r.Error)
	}
	return r.Data, nil
}

// Query runs an instant query at the current time.
func (s *Server) Query(ctx context.Context, expr string) (Result, error) {
	data, err := s.get(ctx, "/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return Result{}, err
	}
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return Result{}, err
	}
	res := Result{Type: d.ResultType}
	switch d.ResultType {
	case "vector":
		var v []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(d.Result, &v); err != nil {
			return Result{}, err
		}
		for _, e := range v {
			val, _ := e.Value[1].(string)
			res.Samples = append(res.Samples, Sample{Metric: e.Metric, Value: val})
		}
	case "scalar", "string":
		var v [2]any
		if err := json.Unmarshal(d.Result, &v); err != nil {
			return Result{}, err
		}
		val, _ := v[1].(string)
		res.Samples = []Sample{{Value: val}}
	default:
		return Result{}, fmt.Errorf("unexpected result type %q", d.ResultType)
	}
	return res, nil
}

// Alert is one alert of /api/v1/alerts.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"` // pending or firing
	Value       string            `json:"value"`
}

// Alerts returns the pending and firing alerts.
func (s *Server) Alerts(ctx context.Context) ([]Alert, error) {
	data, err := s.get(ctx, "/api/v1/alerts", nil)
	if err != nil {
		return nil, err
	}
	var d struct {
		Alerts []Alert `json:"alerts"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	return d.Alerts, nil
}

// Poll calls cond every 200ms until it returns true, an error, or timeout
// passes; it reports which.
func Poll(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("not met within %v: %w", timeout, last)
			}
			return fmt.Errorf("not met within %v", timeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// WaitUp waits until up{job} is 1, that is, until the target has been
// scraped successfully at least once.
func (s *Server) WaitUp(ctx context.Context, job string, timeout time.Duration) error {
	expr := fmt.Sprintf(`up{job=%q} == 1`, job)
	err := Poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		r, err := s.Query(ctx, expr)
		return err == nil && len(r.Samples) > 0, err
	})
	if err != nil {
		return fmt.Errorf("target of job %s not up: %w", job, err)
	}
	return nil
}

// WaitFiring waits until every named alert has at least one firing instance
// and returns the alerts seen last. On timeout the error names the missing ones.
func (s *Server) WaitFiring(ctx context.Context, names []string, timeout time.Duration) ([]Alert, error) {
	var alerts []Alert
	var missing []string
	err := Poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		a, err := s.Alerts(ctx)
		if err != nil {
			return false, err
		}
		alerts = a
		firing := map[string]bool{}
		for _, al := range a {
			if al.State == "firing" {
				firing[al.Labels["alertname"]] = true
			}
		}
		missing = missing[:0]
		for _, n := range names {
			if !firing[n] {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		return alerts, fmt.Errorf("alerts not firing %v: %w", missing, err)
	}
	return alerts, nil
}

// Log returns what the server has logged so far.
func (s *Server) Log() string { return s.log.String() }

// syncBuffer is a bytes.Buffer safe for the process's writes and our reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
