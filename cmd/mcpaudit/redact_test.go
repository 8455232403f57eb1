package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/tap"
)

// lockedBuffer is a log sink safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// seedSecrets puts secrets of every default kind into the arguments and
// results of a capture, the same ones for every call of a session (a retry
// carries what the first attempt carried), and returns them.
func seedSecrets(recs []map[string]any) []string {
	var secrets []string
	seen := map[string]bool{}
	for _, r := range recs {
		sess := fmt.Sprint(r["session"])
		h := fnv.New64a()
		h.Write([]byte(sess))
		n := h.Sum64()
		pw := fmt.Sprintf("hunter2-%x", n)
		key := fmt.Sprintf("sk-live-%016x%08x", n, n>>7)
		mail := fmt.Sprintf("owner-%x@example.com", n%100000)
		bearer := fmt.Sprintf("tok%016xABCDEF", n)
		card := "4111 1111 1111 1111"
		if !seen[sess] {
			seen[sess] = true
			secrets = append(secrets, pw, key, mail, bearer)
		}
		req := r["request"].(map[string]any)
		params := req["params"].(map[string]any)
		args, _ := params["arguments"].(map[string]any)
		if args == nil {
			args = map[string]any{}
			params["arguments"] = args
		}
		args["password"] = pw
		args["api_key"] = key
		args["note"] = "billing contact " + mail + ", card " + card
		if resp, ok := r["response"].(map[string]any); ok {
			if res, ok := resp["result"].(map[string]any); ok {
				res["debug"] = "upstream said: Authorization: Bearer " + bearer
			}
		}
	}
	return append(secrets, "4111 1111 1111 1111")
}

// findingShape is a finding without the ids of its calls, which redaction
// changes for calls that held secrets.
func findingShape(f audit.Finding) string {
	f.Calls = nil
	f.Status = nil
	b, _ := json.Marshal(f)
	return string(b)
}

// TestServe_Redaction posts a capture whose arguments and results hold
// secrets of every default kind, thegram's calls as call records and
// oddlynew's as OTLP spans made by the OpenTelemetry SDK. The findings
// equal analyze's on the same calls, and those of the calls without
// redaction but for the ids of the calls; no secret is in the store's files,
// in the calls read back from the store (decompressed), in any API answer,
// in the logs or in the metrics.
func TestServe_Redaction(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	logs := &lockedBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := startServer(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	recs := mergedCapture(t)
	secrets := seedSecrets(recs)
	var calls, spans []map[string]any
	for _, r := range recs {
		if strings.HasPrefix(r["server"].(string), "oddlynew") {
			spans = append(spans, r)
		} else {
			calls = append(calls, r)
		}
	}
	for i := 0; i < len(calls); i += 25 {
		resp := postCalls(t, s, ndjson(calls[i:min(i+25, len(calls))]), false)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s", resp.Status, b)
		}
	}
	sendSpans(t, spans, func() (sdktrace.SpanExporter, error) {
		return otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(s.ingestAddr), otlptracehttp.WithInsecure())
	})
	seeded := ndjson(recs)
	want := analyzeFindings(t, cfg, seeded)
	if len(want) < 15 {
		t.Fatalf("analyze found only %d findings", len(want))
	}
	waitFindings(t, s, want)

	t.Run("findings_unchanged", func(t *testing.T) {
		off := cfg
		off.Redact.Off = true
		raw := analyzeFindings(t, off, seeded)
		if len(raw) != len(want) {
			t.Fatalf("%d findings without redaction, %d with", len(raw), len(want))
		}
		for i := range raw {
			if findingShape(raw[i]) != findingShape(want[i]) {
				t.Errorf("finding %d differs:\nwithout %s\n   with %s", i, findingShape(raw[i]), findingShape(want[i]))
			}
		}
	})

	// Every API answer: findings, writes, the SLO, the status, the
	// timeline of every document, the page.
	var answers strings.Builder
	get := func(path string) {
		resp, err := http.Get("http://" + s.apiAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers.Write(b)
	}
	docs := map[string]bool{}
	for _, f := range want {
		docs[f.Document] = true
	}
	get("/api/v1/findings?limit=1000")
	get("/api/v1/writes?limit=1000")
	get("/api/v1/slo?window=3650d")
	get("/api/v1/status")
	get("/")
	for d := range docs {
		if d != "" {
			get("/api/v1/documents/" + strings.ReplaceAll(d, "/", "%2F") + "/timeline?limit=1000")
			get("/documents/" + strings.ReplaceAll(d, "/", "%2F"))
		}
	}
	if answers.Len() < 10_000 {
		t.Fatalf("the API answered only %d bytes", answers.Len())
	}
	resp, err := http.Get("http://" + s.apiAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metricsText, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	// The calls read back through the store, decompressed.
	var stored strings.Builder
	n := 0
	s.store.ScanCalls(context.Background(), time.Time{}, func(r *audit.Record) error {
		n++
		stored.Write(r.Call.Arguments)
		stored.Write(r.Call.Result)
		if r.Call.Error != nil {
			stored.WriteString(r.Call.Error.Message)
		}
		stored.WriteString(r.Call.TransportError)
		return nil
	})
	if n < len(recs)/2 {
		t.Fatalf("only %d calls read back from the store", n)
	}
	if !strings.Contains(stored.String(), "[redacted:") {
		t.Fatal("no mask in the stored calls: nothing was redacted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// Every file of the data directory, byte for byte, after the store
	// closed (the WAL checkpointed or not).
	var files strings.Builder
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			files.Write(b)
		}
		return nil
	})
	places := map[string]string{"the store's files": files.String(), "the stored calls": stored.String(),
		"the API": answers.String(), "the logs": logs.String(), "the metrics": string(metricsText)}
	names := make([]string, 0, len(places))
	for k := range places {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, place := range names {
		for _, secret := range secrets {
			if strings.Contains(places[place], secret) {
				t.Errorf("%s hold the secret %q", place, secret)
				break
			}
		}
	}
}

// TestRelayDataDirRedaction: proxy and wrap with --data-dir mask the
// secrets of the calls they record before their in-process collector
// stores them.
func TestRelayDataDirRedaction(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sink, err := openLocalSink(context.Background(), dir, "127.0.0.1:0", "wrap/thegram/test", log)
	if err != nil {
		t.Fatal(err)
	}
	sink.Record(&tap.Record{Time: time.Now().UTC(), Server: "thegram", Session: "s1",
		Request:  []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_write","arguments":{"path":"a.gram","password":"hunter2hunter2","content":"mail bob@example.com"}}}`),
		Response: []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}]}}`)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sink.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var files strings.Builder
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			files.Write(b)
		}
		return nil
	})
	st, err := openReading(dir) // the calls table or the call logs, as serve kept them
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var args string
	var sources []string
	st.ScanCalls(context.Background(), time.Time{}, func(r *audit.Record) error {
		args += string(r.Call.Arguments)
		sources = append(sources, r.Call.Source)
		return nil
	})
	if !strings.Contains(args, `"path":"a.gram"`) || !strings.Contains(args, "[redacted:") {
		t.Fatalf("stored arguments %q: want the path kept and masks", args)
	}
	// Stored under the sender's name as serve names a poster of records.
	if len(sources) != 1 || sources[0] != "calls:wrap/thegram/test" {
		t.Errorf("stored sources %q, want [calls:wrap/thegram/test]", sources)
	}
	for _, secret := range []string{"hunter2hunter2", "bob@example.com"} {
		if strings.Contains(args, secret) || strings.Contains(files.String(), secret) {
			t.Errorf("the relay's data dir holds %q", secret)
		}
	}
}

// TestAnalyzeRedact: analyze --redact gives the findings analyze gives
// without it on a capture without secrets.
func TestAnalyzeRedact(t *testing.T) {
	code1, out1, errs := cliRun("analyze", "--format", "json", "--fail-on", "never", "../../testdata/sample/mixed.ndjson")
	code2, out2, _ := cliRun("analyze", "--redact", "--format", "json", "--fail-on", "never", "../../testdata/sample/mixed.ndjson")
	if code1 != 0 || code2 != 0 || out1 != out2 || len(out1) < 100 {
		t.Fatalf("exit %d and %d; outputs equal %v (%d bytes); %s", code1, code2, out1 == out2, len(out1), errs)
	}
}

// tapRecords turns call records into what a relay captures.
func tapRecords(t *testing.T, recs []map[string]any) []*tap.Record {
	t.Helper()
	var out []*tap.Record
	for _, r := range recs {
		tm, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r["time"]))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := json.Marshal(r["request"])
		tr := &tap.Record{Time: tm, Server: fmt.Sprint(r["server"]), Session: fmt.Sprint(r["session"]), Request: req}
		if resp, ok := r["response"]; ok && resp != nil {
			tr.Response, _ = json.Marshal(resp)
		}
		out = append(out, tr)
	}
	return out
}

// storedIDs returns the ids of the calls a data dir holds.
func storedIDs(t *testing.T, dir string) []string {
	t.Helper()
	st, err := openReading(dir) // the calls table or the call logs, as serve kept them
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var ids []string
	st.ScanCalls(context.Background(), time.Time{}, func(r *audit.Record) error { ids = append(ids, r.Call.ID); return nil })
	sort.Strings(ids)
	return ids
}

// TestRelayBufferRedaction: proxy and wrap with --collector mask secrets
// before a record reaches their buffer: with the collector unreachable the
// buffer files hold the records, masked, and none of the seeded secrets.
// Delivered later, the calls get the ids the collector gives the same raw
// calls sent to it directly (ids depend on neither key).
func TestRelayBufferRedaction(t *testing.T) {
	recs := liveCaptureOf(t, 12, 20)
	secrets := seedSecrets(recs)
	buf := filepath.Join(t.TempDir(), "buf")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rf := relayFlags{collector: "http://" + freePort(t), bufferDir: buf, maxBuffer: 1 << 30, redact: true}
	open := func() recordSink {
		sink, err := openRelaySink(context.Background(), &rf, "proxy", "thegram", "proxy/thegram/test", nil, log)
		if err != nil {
			t.Fatal(err)
		}
		return sink
	}
	sink := open()
	for _, r := range tapRecords(t, recs) {
		sink.Record(r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	sink.Close(ctx)
	cancel()
	var files strings.Builder
	filepath.WalkDir(filepath.Dir(buf), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Base(p) != "redact.key" {
			b, _ := os.ReadFile(p)
			files.Write(b)
		}
		return nil
	})
	if n := strings.Count(files.String(), "\n"); n < len(recs) || !strings.Contains(files.String(), "[redacted:") {
		t.Fatalf("the buffer holds %d lines for %d records, masks: %v", n, len(recs), strings.Contains(files.String(), "[redacted:"))
	}
	for _, secret := range secrets {
		if strings.Contains(files.String(), secret) {
			t.Errorf("the relay's buffer holds the secret %q", secret)
		}
	}

	// Delivered, the calls are those of the raw records sent directly.
	viaRelay, direct := startTest(t, testConfig(t, t.TempDir())), startTest(t, testConfig(t, t.TempDir()))
	rf.collector = "http://" + viaRelay.ingestAddr
	sink = open()
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := sink.Close(ctx); err != nil {
		t.Fatalf("the buffer was not delivered: %v", err)
	}
	resp := postCalls(t, direct, ndjson(recs), false)
	resp.Body.Close()
	for _, s := range []*server{viaRelay, direct} {
		if err := s.shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	got, want := storedIDs(t, viaRelay.cfg.Serve.DataDir), storedIDs(t, direct.cfg.Serve.DataDir)
	if strings.Join(got, ",") != strings.Join(want, ",") || len(want) != len(recs) {
		t.Errorf("%d calls stored through the relay, %d sent directly (of %d): the ids differ", len(got), len(want), len(recs))
	}
}
