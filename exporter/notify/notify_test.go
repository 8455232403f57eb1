package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/tmpfs"
)

var t0 = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

func finding(i int, kind audit.Kind) audit.Finding {
	return audit.Finding{Kind: kind, Severity: kind.Severity(), Server: "thegram", Tenant: "acme",
		Document: fmt.Sprintf("doc-%d.gram", i), Time: t0.Add(time.Duration(i) * time.Second),
		Calls: []string{fmt.Sprintf("c_%020x", i)}, Summary: fmt.Sprintf("finding %d", i)}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// receiver records the bodies posted to it; fail decides the status of
// each request (its 1-based number), 200 when nil. It stands for a webhook
// endpoint that fails on purpose, a fault the test must control.
type receiver struct {
	mu     sync.Mutex
	bodies [][]byte
	keys   []string
	n      int
	fail   func(n int) int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.n++
	status := http.StatusOK
	if r.fail != nil {
		status = r.fail(r.n)
	}
	if status == http.StatusOK {
		r.bodies = append(r.bodies, b)
		r.keys = append(r.keys, req.Header.Get("Idempotency-Key"))
	}
	r.mu.Unlock()
	w.WriteHeader(status)
}

func (r *receiver) got() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bodies)
}

func (r *receiver) requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func webhookConfig(u string) Config {
	c := NewDefaultConfig()
	c.URL, c.Format = u, FormatWebhook
	return c
}

func TestWebhook(t *testing.T) {
	t.Run("retries, then no repeat after a restart", func(t *testing.T) {
		rc := &receiver{fail: func(n int) int {
			if n <= 2 {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		}}
		srv := httptest.NewServer(rc)
		defer srv.Close()
		dir := t.TempDir()
		n, err := New(webhookConfig(srv.URL), dir, "https://audit.example.com/", "", nil, quiet())
		if err != nil {
			t.Fatal(err)
		}
		f := finding(1, audit.KindDoubleAppliedWrite)
		n.Finding(&f)
		waitFor(t, "the finding to arrive after two failures", func() bool { return rc.got() == 1 })
		n.Close()
		var body map[string]any
		if err := json.Unmarshal(rc.bodies[0], &body); err != nil {
			t.Fatal(err)
		}
		if body["id"] != f.ID() || body["kind"] != "double_applied_write" || body["url"] != "https://audit.example.com/findings/"+f.ID() || rc.keys[0] != f.ID() {
			t.Errorf("webhook body %s, key %s", rc.bodies[0], rc.keys[0])
		}
		if n.Retries.Load() != 2 || n.Sent.Load() != 1 {
			t.Errorf("retries %d, sent %d; want 2 and 1", n.Retries.Load(), n.Sent.Load())
		}
		// The detector re-derives the finding after a restart: it is not
		// sent again.
		n2, err := New(webhookConfig(srv.URL), dir, "", "", nil, quiet())
		if err != nil {
			t.Fatal(err)
		}
		n2.Finding(&f)
		g := finding(2, audit.KindUnverifiedWrite)
		n2.Finding(&g)
		waitFor(t, "the second finding", func() bool { return rc.got() == 2 })
		time.Sleep(100 * time.Millisecond)
		n2.Close()
		if rc.got() != 2 {
			t.Fatalf("after a restart the receiver got %d notifications, want 2 (no repeat)", rc.got())
		}
	})
	t.Run("queued findings survive a stop", func(t *testing.T) {
		down := &receiver{fail: func(int) int { return http.StatusBadGateway }}
		srv := httptest.NewServer(down)
		dir := t.TempDir()
		n, err := New(webhookConfig(srv.URL), dir, "", "", nil, quiet())
		if err != nil {
			t.Fatal(err)
		}
		fs := []audit.Finding{finding(1, audit.KindDoubleAppliedWrite), finding(2, audit.KindDuplicateCreate), finding(3, audit.KindIntegrityFailure)}
		for i := range fs {
			n.Finding(&fs[i])
		}
		waitFor(t, "a first attempt", func() bool { return down.requests() > 0 })
		n.Close()
		srv.Close()
		up := &receiver{}
		srv2 := httptest.NewServer(up)
		defer srv2.Close()
		n2, err := New(webhookConfig(srv2.URL), dir, "", "", nil, quiet())
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the queued findings after the restart", func() bool { return up.got() == 3 })
		n2.Close()
		seen := map[string]bool{}
		for _, k := range up.keys {
			seen[k] = true
		}
		for _, f := range fs {
			if !seen[f.ID()] {
				t.Errorf("finding %s was lost in the restart", f.ID())
			}
		}
	})
	t.Run("a refusal is not retried", func(t *testing.T) {
		rc := &receiver{fail: func(int) int { return http.StatusBadRequest }}
		srv := httptest.NewServer(rc)
		defer srv.Close()
		n, err := New(webhookConfig(srv.URL), t.TempDir(), "", "", nil, quiet())
		if err != nil {
			t.Fatal(err)
		}
		f := finding(1, audit.KindDoubleAppliedWrite)
		n.Finding(&f)
		waitFor(t, "the refusal", func() bool { return n.Failed.Load() == 1 })
		time.Sleep(1200 * time.Millisecond) // past the first backoff
		n.Close()
		if rc.requests() != 1 {
			t.Errorf("a 400 was retried: %d requests", rc.requests())
		}
	})
	t.Run("below the minimum severity nothing is sent", func(t *testing.T) {
		rc := &receiver{}
		srv := httptest.NewServer(rc)
		defer srv.Close()
		n, err := New(webhookConfig(srv.URL), t.TempDir(), "", "", nil, quiet())
		if err != nil {
			t.Fatal(err)
		}
		f := finding(1, audit.KindWastedRetry) // info
		g := finding(2, audit.KindUnsafeRetry) // warning
		n.Finding(&f)
		n.Finding(&g)
		waitFor(t, "the warning", func() bool { return rc.got() == 1 })
		n.Close()
		if !strings.Contains(string(rc.bodies[0]), `"unsafe_retry"`) {
			t.Errorf("sent %s, want only the warning", rc.bodies[0])
		}
	})
}

// storeOf serves stored findings for the catch-up after an overflow.
type storeOf []audit.Finding

func (s storeOf) Findings(_ context.Context, q audit.FindingQuery) (audit.FindingPage, error) {
	var out []audit.Finding
	for _, f := range s {
		if !f.Time.Before(q.Since) && f.Severity.Rank() >= q.Severity.Rank() {
			out = append(out, f)
		}
	}
	return audit.FindingPage{Findings: out}, nil
}

func TestOverflowCatchUp(t *testing.T) {
	rc := &receiver{}
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-block // the first request holds the worker while the queue fills
		rc.ServeHTTP(w, r)
	}))
	defer srv.Close()
	var fs storeOf
	for i := range 10 {
		fs = append(fs, finding(i, audit.KindDoubleAppliedWrite))
	}
	cfg := webhookConfig(srv.URL)
	cfg.QueueSize = 2
	n, err := New(cfg, t.TempDir(), "", "", fs, quiet())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range fs {
		n.Finding(&fs[i])
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("Finding blocked for %v with the receiver stuck", d)
	}
	if n.Dropped.Load() == 0 {
		t.Fatal("nothing was dropped from a queue of 2")
	}
	close(block)
	waitFor(t, "every finding, from the queue or the catch-up", func() bool { return rc.got() == len(fs) })
	time.Sleep(2500 * time.Millisecond) // another catch-up tick: still no repeat
	n.Close()
	if rc.got() != len(fs) {
		t.Errorf("the receiver got %d notifications, want %d", rc.got(), len(fs))
	}
}

// TestAlertmanager posts to a real Alertmanager (Debian's
// prometheus-alertmanager) and reads the alert back from its API.
func TestAlertmanager(t *testing.T) {
	bin, err := exec.LookPath("prometheus-alertmanager")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("prometheus-alertmanager is not installed: scripts/test.sh installs it")
		}
		t.Skip("SKIPPING: prometheus-alertmanager is not installed (apt-get install prometheus-alertmanager)")
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "alertmanager.yml")
	os.WriteFile(cfgPath, []byte("route:\n  receiver: nobody\nreceivers:\n  - name: nobody\n"), 0o644)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--cluster.listen-address=")
	out, _ := os.Create(filepath.Join(dir, "alertmanager.log"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	base := "http://" + addr
	waitFor(t, "alertmanager to be ready", func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	cfg := NewDefaultConfig()
	cfg.URL = base + "/api/v2/alerts"
	n, err := New(cfg, t.TempDir(), "https://audit.example.com", "https://wiki.example.com/mcpaudit/runbooks", nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	f := finding(7, audit.KindDoubleAppliedWrite)
	f.Session, f.Key = "s-1", "req-9"
	n.Finding(&f)
	waitFor(t, "the notifier to send", func() bool { return n.Sent.Load() == 1 })
	n.Close()
	var alerts []struct {
		Labels       map[string]string `json:"labels"`
		Annotations  map[string]string `json:"annotations"`
		GeneratorURL string            `json:"generatorURL"`
		Status       struct {
			State string `json:"state"`
		} `json:"status"`
	}
	resp, err := http.Get(base + "/api/v2/alerts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&alerts); err != nil {
		t.Fatal(err)
	}
	if len(alerts) != 1 {
		t.Fatalf("alertmanager holds %d alerts, want 1: %+v", len(alerts), alerts)
	}
	a := alerts[0]
	want := map[string]string{"alertname": AlertName, "kind": "double_applied_write", "severity": "critical",
		"server": "thegram", "tenant": "acme", "finding_id": f.ID()}
	for k, v := range want {
		if a.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, a.Labels[k], v)
		}
	}
	if a.Annotations["document"] != f.Document || a.Annotations["summary"] != f.Summary ||
		a.GeneratorURL != "https://audit.example.com/findings/"+f.ID() || a.Status.State != "active" {
		t.Errorf("alert = %+v", a)
	}
	// A critical finding pages: the page names its runbook (op23 D4).
	if got, want := a.Annotations["runbook_url"], "https://wiki.example.com/mcpaudit/runbooks#mcpauditfinding"; got != want {
		t.Errorf("runbook_url = %q, want %q", got, want)
	}
}

func TestConfigValidate(t *testing.T) {
	f := func(mut func(*Config), want string) {
		t.Helper()
		c := NewDefaultConfig()
		mut(&c)
		err := c.Validate()
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("Validate() = %v, want an error naming %q", err, want)
		}
	}
	f(func(c *Config) {}, "")
	f(func(c *Config) { c.URL = "http://am:9093/api/v2/alerts" }, "")
	f(func(c *Config) { c.URL = "am:9093" }, "url")
	f(func(c *Config) { c.Format = "slack" }, "format")
	f(func(c *Config) { c.MinSeverity = "high" }, "min_severity")
	f(func(c *Config) { c.QueueSize = 0 }, "queue_size")
	f(func(c *Config) { c.Timeout = 0 }, "timeout")
}

// TestJournal_FullDiskLeavesNoTemp: the compaction at the start, on a
// full disk (a real tmpfs), fails and leaves the old journal as it was,
// and no temporary file. Before datadir.WriteFileSynced the partial
// notify-journal.ndjson.tmp stayed, holding the space the next start
// needed.
func TestJournal_FullDiskLeavesNoTemp(t *testing.T) {
	dir := tmpfs.Mount(t, "256k")
	path := filepath.Join(dir, "notify-journal.ndjson")
	var b bytes.Buffer
	at := time.Now().UTC().Format(time.RFC3339Nano)
	for i := 0; b.Len() < 160<<10; i++ {
		fmt.Fprintf(&b, `{"op":"sent","id":"finding-%08d","at":%q}`+"\n", i, at)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := openJournal(dir)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("openJournal on a full disk = %v, want ENOSPC", err)
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 1 || names[0] != path {
		t.Errorf("the directory holds %q, want the journal alone", names)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, b.Bytes()) {
		t.Errorf("the journal changed (%d bytes, %v), want it as it was (%d bytes)", len(got), err, b.Len())
	}
}
