package forward

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// collector stands in for the ingest endpoint of serve so that its answers
// can be scripted (503 with Retry-After, 400): it decodes every body with
// the collector's own call-record decoder.
type collector struct {
	mu      sync.Mutex
	lines   []string
	posts   []time.Time
	headers []http.Header
	answer  func(n int) (int, http.Header) // status for the n-th POST (0-based); nil means 200
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	n := len(c.posts)
	c.posts = append(c.posts, time.Now())
	c.headers = append(c.headers, r.Header.Clone())
	answer := c.answer
	c.mu.Unlock()
	if r.URL.Path != "/v1/calls" {
		http.NotFound(w, r)
		return
	}
	if answer != nil {
		if code, h := answer(n); code != http.StatusOK {
			for k, v := range h {
				w.Header()[k] = v
			}
			http.Error(w, "scripted", code)
			return
		}
	}
	zr, err := gzip.NewReader(r.Body)
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	body, _ := io.ReadAll(zr)
	dec, err := capture.NewDecoder(bytes.NewReader(body), "body")
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	accepted := 0
	for {
		c, err := dec.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		_ = c
		accepted++
	}
	c.mu.Lock()
	for _, l := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		c.lines = append(c.lines, l)
	}
	c.mu.Unlock()
	fmt.Fprintf(w, `{"accepted":%d,"rejected":0}`, accepted)
}

func (c *collector) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

func line(i int) []byte {
	return []byte(fmt.Sprintf(`{"time":"2026-11-01T10:00:%02d.000001Z","server":"thegram","session":"s","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"a"}}}}`+"\n", i%60, i))
}

func testConfig(t testing.TB, url string) Config {
	cfg := NewDefaultConfig()
	cfg.URL, cfg.Source, cfg.BufferDir = url, "proxy/thegram/test", t.TempDir()
	cfg.FlushInterval, cfg.MinBackoff, cfg.MaxBackoff = 20*time.Millisecond, 10*time.Millisecond, 50*time.Millisecond
	cfg.BatchRecords = 10
	return cfg
}

func newForwarder(t testing.TB, cfg Config) (*Forwarder, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.NewRelay(reg, "thegram")
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(cfg, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return f, reg
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestForwarder(t *testing.T) {
	t.Run("delivers every record in order, batched, with its headers", func(t *testing.T) {
		c := &collector{}
		srv := httptest.NewServer(c)
		defer srv.Close()
		cfg := testConfig(t, srv.URL)
		cfg.Token = "s3cret"
		f, reg := newForwarder(t, cfg)
		for i := range 35 {
			if err := f.Add(line(i)); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "35 records", func() bool { return len(c.got()) == 35 })
		f.Close(context.Background())
		for i, l := range c.got() {
			if l+"\n" != string(line(i)) {
				t.Fatalf("line %d: %s", i, l)
			}
		}
		if len(c.posts) != 4 {
			t.Errorf("%d POSTs for 35 records in batches of 10", len(c.posts))
		}
		h := c.headers[0]
		if h.Get(Header) != "proxy/thegram/test" || h.Get("Authorization") != "Bearer s3cret" || h.Get("Content-Encoding") != "gzip" {
			t.Errorf("headers %v", h)
		}
		if got := counter(t, reg, metrics.ProxyForwardRecordsTotal, metrics.ForwardSent); got != 35 {
			t.Errorf("sent counter %v", got)
		}
		if n := len(glob(t, cfg.BufferDir, "*")); n != 1 { // rejected/ only
			t.Errorf("buffer dir holds %d entries after delivery", n)
		}
		if v := bufferBytes(t, reg); v != 0 {
			t.Errorf("buffer bytes %v after delivery", v)
		}
	})

	t.Run("collector down, forwarder restarted: nothing lost, nothing twice", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nobody listens: connection refused
		cfg := testConfig(t, "http://"+addr)
		f, reg := newForwarder(t, cfg)
		for i := range 25 {
			if err := f.Add(line(i)); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "a failed POST", func() bool { return counter(t, reg, metrics.ProxyForwardRequestsTotal, metrics.PostRetry) > 0 })
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		f.Close(ctx)
		cancel()
		if len(glob(t, cfg.BufferDir, "*.ndjson")) != 3 {
			t.Fatalf("segments on disk: %v", glob(t, cfg.BufferDir, "*"))
		}
		c := &collector{}
		ln, err = net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("cannot listen on %s again: %v", addr, err)
		}
		srv := &http.Server{Handler: c}
		go srv.Serve(ln)
		defer srv.Close()
		f2, _ := newForwarder(t, cfg)
		for i := 25; i < 30; i++ {
			f2.Add(line(i))
		}
		waitFor(t, "30 records", func() bool { return len(c.got()) == 30 })
		f2.Close(context.Background())
		for i, l := range c.got() {
			if l+"\n" != string(line(i)) {
				t.Fatalf("line %d: %s", i, l)
			}
		}
	})

	t.Run("Retry-After is honoured", func(t *testing.T) {
		c := &collector{answer: func(n int) (int, http.Header) {
			if n == 0 {
				return http.StatusServiceUnavailable, http.Header{"Retry-After": {"1"}}
			}
			return http.StatusOK, nil
		}}
		srv := httptest.NewServer(c)
		defer srv.Close()
		f, _ := newForwarder(t, testConfig(t, srv.URL))
		f.Add(line(0))
		waitFor(t, "the record", func() bool { return len(c.got()) == 1 })
		f.Close(context.Background())
		if gap := c.posts[1].Sub(c.posts[0]); gap < time.Second {
			t.Errorf("retried after %v despite Retry-After: 1", gap)
		}
	})

	t.Run("a refused batch is set aside and the rest goes on", func(t *testing.T) {
		c := &collector{answer: func(n int) (int, http.Header) {
			if n == 0 {
				return http.StatusBadRequest, nil
			}
			return http.StatusOK, nil
		}}
		srv := httptest.NewServer(c)
		defer srv.Close()
		cfg := testConfig(t, srv.URL)
		f, reg := newForwarder(t, cfg)
		for i := range 20 {
			f.Add(line(i))
		}
		waitFor(t, "the second batch", func() bool { return len(c.got()) == 10 })
		f.Close(context.Background())
		got := glob(t, filepath.Join(cfg.BufferDir, rejectDir), "*.ndjson")
		if len(got) != 1 {
			t.Fatalf("rejected segments %v", got)
		}
		if reason, err := os.ReadFile(strings.TrimSuffix(got[0], sealedExt) + reasonExt); err != nil || !strings.Contains(string(reason), "400 Bad Request") {
			t.Errorf("reason beside the refused segment: %q, %v", reason, err)
		}
		if got := counter(t, reg, metrics.ProxyForwardRecordsTotal, metrics.ForwardRejected); got != 10 {
			t.Errorf("rejected counter %v", got)
		}
	})

	t.Run("a full buffer refuses new records and keeps the old", func(t *testing.T) {
		cfg := testConfig(t, "http://127.0.0.1:1")
		cfg.MaxBufferBytes = int64(len(line(0))*3 + 10)
		f, reg := newForwarder(t, cfg)
		var full int
		for i := range 5 {
			if err := f.Add(line(i)); err == ErrBufferFull {
				full++
			} else if err != nil {
				t.Fatal(err)
			}
		}
		if full != 2 || counter(t, reg, metrics.ProxyForwardRecordsTotal, metrics.ForwardDropped) != 2 {
			t.Fatalf("%d refused", full)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		f.Close(ctx)
		cancel()
		var n int
		for _, p := range glob(t, cfg.BufferDir, "*.ndjson") {
			b, _ := os.ReadFile(p)
			n += bytes.Count(b, []byte("\n"))
		}
		if n != 3 {
			t.Fatalf("%d records kept, want 3", n)
		}
	})

	t.Run("a dead process's open segment is sent", func(t *testing.T) {
		c := &collector{}
		srv := httptest.NewServer(c)
		defer srv.Close()
		cfg := testConfig(t, srv.URL)
		os.MkdirAll(cfg.BufferDir, 0o755)
		os.WriteFile(filepath.Join(cfg.BufferDir, "00000000000000000001-999999-1"+openExt), append(line(0), line(1)...), 0o644)
		f, _ := newForwarder(t, cfg)
		waitFor(t, "the orphan's records", func() bool { return len(c.got()) == 2 })
		f.Close(context.Background())
	})
}

// bufferBytes reads the buffer gauge.
func bufferBytes(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == metrics.ProxyBufferBytes {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no buffer gauge")
	return 0
}

func glob(t *testing.T, dir, pat string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, pat))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	f := func(in string, want time.Duration) {
		t.Helper()
		if got := retryAfter(in, now); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", in, got, want)
		}
	}
	f("", 0)
	f("5", 5*time.Second)
	f(" 7 ", 7*time.Second)
	f("-3", 0)
	f("junk", 0)
	f("Sun, 01 Nov 2026 10:00:30 GMT", 30*time.Second)
	f("Sun, 01 Nov 2026 09:00:00 GMT", 0)
	f("86400", maxRetryAfter)
}

func TestConfig_Validate(t *testing.T) {
	err := Config{}.Validate()
	for _, key := range []string{"forward.url", "forward.source", "forward.buffer_dir", "forward.max_buffer_bytes", "forward.flush_interval"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("Validate of the zero config does not name %s: %v", key, err)
		}
	}
	cfg := NewDefaultConfig()
	cfg.URL, cfg.Source, cfg.BufferDir = "ftp://x", "s", "d"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "forward.url") {
		t.Errorf("ftp URL: %v", err)
	}
	cfg.URL = "http://127.0.0.1:4318"
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}
}

// keepIngester keeps the records the real collector handler takes, as the
// store behind it would; it stands in for the store only.
type keepIngester struct {
	mu   sync.Mutex
	recs []*audit.Record
}

func (k *keepIngester) Ingest(_ context.Context, batches ...audit.Batch) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, b := range batches {
		k.recs = append(k.recs, b.Records...)
		n += len(b.Records)
	}
	return n, nil
}

func (k *keepIngester) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.recs)
}

// TestForwarder_RecordsRejectedInA2xx: the real collector handler takes a
// batch but rejects one record of it (no time) in its 200 answer; the
// segment is set aside in rejected/ as a refused batch is, with the
// answer naming the record beside it, and the other batches go on.
func TestForwarder_RecordsRejectedInA2xx(t *testing.T) {
	in := &keepIngester{}
	srv := httptest.NewServer(receiver.New(receiver.NewDefaultConfig(), dialect.Config{}, in, nil, slog.New(slog.DiscardHandler)).Handler())
	defer srv.Close()
	cfg := testConfig(t, srv.URL)
	f, reg := newForwarder(t, cfg)
	var sent []byte
	for i := range 20 {
		l := line(i)
		if i == 2 {
			l = bytes.Replace(l, []byte(`"time":"2026-11-01T10:00:02.000001Z",`), nil, 1)
		}
		if i < 10 {
			sent = append(sent, l...)
		}
		if err := f.Add(l); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both batches", func() bool { return len(glob(t, cfg.BufferDir, "*.ndjson")) == 0 && in.count() == 19 })
	f.Close(context.Background())
	// And its source (rev18p: every segment names it): posted again, it
	// goes under it.
	kept := glob(t, filepath.Join(cfg.BufferDir, rejectDir), "*")
	if len(kept) != 3 || !strings.HasSuffix(kept[2], sourceExt) {
		t.Fatalf("rejected/ holds %v, want a segment, its reason and its source", kept)
	}
	seg, err := os.ReadFile(kept[0])
	if err != nil || !bytes.Equal(seg, sent) {
		t.Errorf("set-aside segment %s (%v):\n%s\nwant the first batch as sent:\n%s", kept[0], err, seg, sent)
	}
	reason, err := os.ReadFile(strings.TrimSuffix(kept[0], sealedExt) + reasonExt)
	if err != nil || !strings.Contains(string(reason), "200 OK") || !strings.Contains(string(reason), `"rejected":1`) ||
		!strings.Contains(string(reason), "body:3: field time") {
		t.Errorf("reason %s (%v) does not give the answer naming line 3's time", reason, err)
	}
	if got := counter(t, reg, metrics.ProxyForwardRecordsTotal, metrics.ForwardRejected); got != 1 {
		t.Errorf("rejected counter %v, want 1", got)
	}
	if got := counter(t, reg, metrics.ProxyForwardRecordsTotal, metrics.ForwardSent); got != 19 {
		t.Errorf("sent counter %v, want 19", got)
	}
	if v := bufferBytes(t, reg); v != 0 {
		t.Errorf("buffer bytes %v after delivery", v)
	}
}

// syncBuffer is a log destination written by the forwarder's goroutine and
// read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimSpace(s.b.String()), "\n")
}

// TestForwarder_RetryLogSaysTheWait: with the collector unreachable, each
// "will retry" line gives the wait the forwarder takes, the backoff growing
// from min_backoff, not the collector's Retry-After, which a refused
// connection never sends (found from outside: "retry_in":"0s" at every try
// of a 45-second outage while the tries came 0.2 s to 18 s apart).
func TestForwarder_RetryLogSaysTheWait(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens: connection refused
	cfg := testConfig(t, "http://"+addr)
	cfg.MinBackoff, cfg.MaxBackoff = 40*time.Millisecond, 400*time.Millisecond
	reg := prometheus.NewRegistry()
	m, err := metrics.NewRelay(reg, "thegram")
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	f, err := New(cfg, m, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Add(line(0)); err != nil {
		t.Fatal(err)
	}
	var waits []time.Duration
	waitFor(t, "three retries", func() bool {
		waits = waits[:0]
		for _, l := range logs.lines() {
			var e struct {
				Msg     string        `json:"msg"`
				RetryIn time.Duration `json:"retry_in"` // slog's JSON handler writes nanoseconds
			}
			if l == "" {
				continue
			}
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("log line %s: %v", l, err)
			}
			if e.Msg == "cannot send call records; will retry" {
				waits = append(waits, e.RetryIn)
			}
		}
		return len(waits) >= 3
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	f.Close(ctx) // the collector is down: Close gives up when ctx ends
	// The k-th wait is drawn from [b/2, b] with b = 40ms × 2^k.
	for k, d := range waits[:3] {
		if b := cfg.MinBackoff << k; d < b/2 || d > b {
			t.Errorf("retry %d: retry_in %v, want within [%v, %v] (every wait: %v)", k+1, d, b/2, b, waits)
		}
	}
}
