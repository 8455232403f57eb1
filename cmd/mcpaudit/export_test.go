package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// exportCalls runs mcpaudit export with args and returns its records.
func exportCalls(t *testing.T, args ...string) []byte {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), append([]string{"export"}, args...), nil, &out, &errb); code != 0 {
		t.Fatalf("mcpaudit export %v: exit %d: %s", args, code, errb.String())
	}
	n := bytes.Count(out.Bytes(), []byte("\n"))
	if want := exportCounted(n); !strings.Contains(errb.String(), want) {
		t.Fatalf("mcpaudit export %v: stderr %q, want %q", args, errb.String(), want)
	}
	return out.Bytes()
}

// postBody posts body to path on serve's ingest listener and fails the test
// unless it is acknowledged.
func postBody(t *testing.T, s *server, path, contentType string, body []byte) {
	t.Helper()
	resp, err := http.Post("http://"+s.ingestAddr+path, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s %s", path, resp.Status, b)
	}
}

// sameFindings fails the test unless got and want are the same findings:
// the same ids and the same JSON objects.
func sameFindings(t *testing.T, what string, got, want []audit.Finding) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: the capture gives no finding: the comparison would prove nothing", what)
	}
	gj, _ := json.Marshal(sortFindings(got))
	wj, _ := json.Marshal(sortFindings(want))
	if bytes.Equal(gj, wj) {
		return
	}
	ids := func(fs []audit.Finding) map[string]string {
		m := map[string]string{}
		for _, f := range fs {
			b, _ := json.Marshal(f)
			m[f.ID()] = string(b)
		}
		return m
	}
	g, w := ids(got), ids(want)
	var diff []string
	for id, wf := range w {
		if gf, ok := g[id]; !ok {
			diff = append(diff, "missing "+wf)
		} else if gf != wf {
			diff = append(diff, fmt.Sprintf("differs\n got %s\nwant %s", gf, wf))
		}
	}
	for id, gf := range g {
		if _, ok := w[id]; !ok {
			diff = append(diff, "extra "+gf)
		}
	}
	sort.Strings(diff)
	if len(diff) > 6 {
		diff = diff[:6]
	}
	t.Fatalf("%s: %d findings, analyze of the capture %d:\n%s", what, len(got), len(want), strings.Join(diff, "\n"))
}

// TestExport_AnalyzeSameFindings is the export's contract: for a capture
// C, analyze of what export writes of the calls serve stored from C gives
// the findings analyze gives of C, with the same ids and objects, whether
// C came as call records or as OTLP spans, and whether the export is read
// through serve's API or from the data dir while serve runs. Each capture
// goes to a serve of its own.
func TestExport_AnalyzeSameFindings(t *testing.T) {
	t.Parallel()
	examples := func(ext string) [][]byte {
		files, _ := filepath.Glob("../../testdata/examples/*" + ext)
		sort.Strings(files)
		var out [][]byte
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
		return out
	}
	gen := capgen.Generate(capgen.Config{Seed: 49, Sessions: 300, Span: 20 * time.Minute, AnomalyRate: 0.4, NoiseRate: 0.005})
	genBody := bytes.Join(gen.Lines, []byte("\n"))
	var genOTLP bytes.Buffer
	if err := capgen.WriteOTLP(&genOTLP, gen.Lines, 3); err != nil {
		t.Fatal(err)
	}
	recs := mergedCapture(t)
	// A capture whose calls hold secrets: serve masks them before it
	// stores them (redact, on by default).
	secret, err := os.ReadFile("../../testdata/examples/thegram-argument-wasted.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	secret = bytes.ReplaceAll(secret, []byte(`"mode":"fast"`), []byte(`"mode":"fast","api_key":"sk-live-0123456789abcdefghij","note":"ping ops@example.com"`))
	for _, tc := range []struct {
		name string
		// capture is C, as analyze reads it.
		capture [][]byte
		// send gives C to serve.
		send func(t *testing.T, s *server)
		// secrets: C holds secrets, which serve stored masked.
		secrets bool
	}{
		{"secrets_as_records", [][]byte{secret}, func(t *testing.T, s *server) {
			postBody(t, s, "/v1/calls", "application/x-ndjson", secret)
		}, true},
		{"examples_as_records", [][]byte{ndjson(recs)}, func(t *testing.T, s *server) {
			postBody(t, s, "/v1/calls", "application/x-ndjson", ndjson(recs))
		}, false},
		{"examples_as_otlp_json", examples(".otlp.json"), func(t *testing.T, s *server) {
			for _, b := range examples(".otlp.json") {
				postBody(t, s, "/v1/traces", "application/json", b)
			}
		}, false},
		// The OpenTelemetry Go SDK's spans of the examples' calls: C is
		// the records they were made from (TestServe_OTLP).
		{"examples_through_otel_sdk", [][]byte{ndjson(recs)}, func(t *testing.T, s *server) {
			sendSpans(t, recs, func() (sdktrace.SpanExporter, error) {
				return otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(s.ingestAddr), otlptracehttp.WithInsecure())
			})
		}, false},
		{"examples_as_payloadless_spans", [][]byte{payloadlessOTLP(t, recs)}, func(t *testing.T, s *server) {
			postBody(t, s, "/v1/traces", "application/json", payloadlessOTLP(t, recs))
		}, false},
		{"generated_as_records", [][]byte{genBody}, func(t *testing.T, s *server) {
			postBody(t, s, "/v1/calls", "application/x-ndjson", genBody)
		}, false},
		{"generated_as_otlp_json", [][]byte{genOTLP.Bytes()}, func(t *testing.T, s *server) {
			postBody(t, s, "/v1/traces", "application/json", genOTLP.Bytes())
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := testConfig(t, dir)
			s := startTest(t, cfg)
			tc.send(t, s)
			for _, redact := range []bool{false, true} {
				acfg := cfg
				acfg.Redact.Off = !redact
				want := analyzeCaptures(t, acfg, tc.capture)
				for _, from := range [][]string{{"--api-url", "http://" + s.apiAddr}, {"--data-dir", dir}} {
					out := exportCalls(t, from...)
					got := analyzeFindings(t, acfg, out)
					if tc.secrets {
						if bytes.Contains(out, []byte("sk-live")) || bytes.Contains(out, []byte("ops@example.com")) || !bytes.Contains(out, []byte("[redacted:")) {
							t.Fatalf("export %s: the secrets are not masked:\n%s", from[0], out)
						}
						if !redact {
							// What the export cannot give back: the secrets.
							// Without --redact, analyze hashes the masks
							// where the capture had the secrets: other
							// call ids, so other finding ids.
							if len(got) != len(want) || got[0].ID() == want[0].ID() || got[0].Calls[0] == want[0].Calls[0] {
								t.Fatalf("export %s of masked calls, analyze without --redact: want the same findings under other ids, got %+v, analyze of the capture %+v", from[0], got, want)
							}
							continue
						}
					}
					sameFindings(t, fmt.Sprintf("export %s, analyze redact %v", from[0], redact), got, want)
				}
			}
		})
	}
}

// analyzeCaptures is analyzeFindings of several inputs at once, merged by
// event time as analyze merges its files, with their bad lines passed
// over as analyze passes over them.
func analyzeCaptures(t *testing.T, cfg Config, inputs [][]byte) []audit.Finding {
	t.Helper()
	var fs []audit.Finding
	dir := t.TempDir()
	var names []string
	for i, b := range inputs {
		n := filepath.Join(dir, fmt.Sprintf("in%02d.json", i))
		if err := os.WriteFile(n, b, 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	a := newAnalyzer(cfg, findingSink(func(f *audit.Finding) { fs = append(fs, *f) }))
	var rejects rejectLog
	if err := analyzeInputs(context.Background(), names, nil, a, &rejects, new(atomic.Int64)); err != nil {
		t.Fatal(err)
	}
	a.eng.Flush()
	return sortFindings(fs)
}

// payloadlessOTLP writes the call records recs as one OTLP JSON document
// of spans that record neither the arguments' result nor, for every
// other call, a JSON-RPC id: a failure only as error.type (a tool error's
// server code, tool_error, a JSON-RPC code, E_APP_NOT_RUNNING, a transport
// error) and the status, as instrumentation that leaves the opt-in
// result out records it.
func payloadlessOTLP(t *testing.T, recs []map[string]any) []byte {
	t.Helper()
	type kv = map[string]any
	str := func(k, v string) kv { return kv{"key": k, "value": kv{"stringValue": v}} }
	byServer := map[string][]kv{}
	var servers []string
	for i, r := range recs {
		server := r["server"].(string)
		if byServer[server] == nil {
			servers = append(servers, server)
		}
		start, err := time.Parse(time.RFC3339Nano, r["time"].(string))
		if err != nil {
			t.Fatal(err)
		}
		ms, _ := r["duration_ms"].(float64)
		req := r["request"].(map[string]any)
		params := req["params"].(map[string]any)
		args, _ := json.Marshal(params["arguments"])
		attrs := []kv{str("mcp.method.name", "tools/call"), str("gen_ai.tool.name", params["name"].(string)),
			str("gen_ai.tool.call.arguments", string(args))}
		if i%2 == 0 {
			attrs = append(attrs, str("jsonrpc.request.id", fmt.Sprint(req["id"])))
		}
		if sess, ok := r["session"].(string); ok {
			attrs = append(attrs, str("mcp.session.id", sess))
		}
		status := kv{"code": 1}
		if te, ok := r["transport_error"].(string); ok {
			attrs = append(attrs, str("error.type", te))
			status = kv{"code": 2, "message": te}
		} else if resp, ok := r["response"].(map[string]any); ok {
			if e, ok := resp["error"].(map[string]any); ok {
				code := fmt.Sprint(e["code"])
				if d, ok := e["data"].(map[string]any); ok && d["code"] == "E_APP_NOT_RUNNING" {
					code = "E_APP_NOT_RUNNING"
				}
				attrs = append(attrs, str("error.type", code))
				status = kv{"code": 2, "message": fmt.Sprint(e["message"])}
			} else if res, _ := resp["result"].(map[string]any); res["isError"] == true {
				code, msg := "tool_error", ""
				if sc, ok := res["structuredContent"].(map[string]any); ok {
					if e, ok := sc["error"].(map[string]any); ok {
						if c, ok := e["code"].(string); ok && c != "" {
							code = c
						}
						msg, _ = e["message"].(string)
					} else if m, ok := sc["error"].(string); ok {
						msg = m
					}
				}
				attrs = append(attrs, str("error.type", code))
				status = kv{"code": 2, "message": msg}
			}
		}
		var trace, span [8]byte
		copy(trace[:], fmt.Sprintf("%08d", i))
		copy(span[:], fmt.Sprintf("%08d", i+1))
		byServer[server] = append(byServer[server], kv{
			"traceId": hex.EncodeToString(append(trace[:], trace[:]...)), "spanId": hex.EncodeToString(span[:]),
			"name": "tools/call " + params["name"].(string), "kind": 2,
			"startTimeUnixNano": fmt.Sprint(start.UnixNano()), "endTimeUnixNano": fmt.Sprint(start.Add(time.Duration(ms * float64(time.Millisecond))).UnixNano()),
			"attributes": attrs, "status": status,
		})
	}
	var rs []kv
	for _, server := range servers {
		rs = append(rs, kv{"resource": kv{"attributes": []kv{str("service.name", server)}},
			"scopeSpans": []kv{{"scope": kv{"name": "mcp-server"}, "spans": byServer[server]}}})
	}
	b, err := json.Marshal(kv{"resourceSpans": rs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestExport_ClickHouse: serve on a real ClickHouse exports what it
// stored through its API, and analyze of the export finds what analyze of
// the capture finds, as on the embedded store.
func TestExport_ClickHouse(t *testing.T) {
	t.Parallel() // a serve of its own, its own ClickHouse database
	dsn := clickhouseDSN(t)
	recs := mergedCapture(t)
	body := ndjson(recs)
	cfg := testConfig(t, t.TempDir())
	cfg.Serve.Store = "clickhouse"
	cfg.Serve.ClickHouse.DSN = dsn
	cfg.Serve.ClickHouse.Database = fmt.Sprintf("mcpaudit_export_%d", time.Now().UnixNano())
	cfg.Serve.ClickHouse.BatchAge = 50 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := startTest(t, cfg)
	// The examples again as spans without payloads, 100 days earlier, so
	// that no call of one carrier shares an instant with one of the other.
	var later []map[string]any
	for _, r := range recs {
		c := map[string]any{}
		for k, v := range r {
			c[k] = v
		}
		tm, _ := time.Parse(time.RFC3339Nano, r["time"].(string))
		c["time"] = tm.Add(-100 * 24 * time.Hour).Format(time.RFC3339Nano)
		later = append(later, c)
	}
	spans := payloadlessOTLP(t, later)
	postBody(t, s, "/v1/calls", "application/x-ndjson", body)
	postBody(t, s, "/v1/traces", "application/json", spans)
	want := analyzeCaptures(t, cfg, [][]byte{body, spans})
	// ClickHouse answers for what it has inserted: the calls acknowledged
	// from the spool are there within a few batches.
	var out []byte
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		out = exportCalls(t, "--api-url", "http://"+s.apiAddr)
		n := bytes.Count(out, []byte("\n"))
		if n == 2*len(recs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ClickHouse holds %d calls after a minute, want %d", n, 2*len(recs))
		}
	}
	sameFindings(t, "export from ClickHouse", analyzeFindings(t, cfg, out), want)
	// A range is a range: the first example's calls only.
	first, _ := time.Parse(time.RFC3339Nano, recs[0]["time"].(string))
	part := exportCalls(t, "--api-url", "http://"+s.apiAddr, "--until", first.Add(time.Hour).Format(time.RFC3339Nano), "--mcp-server", recs[0]["server"].(string))
	if n := bytes.Count(part, []byte("\n")); n == 0 || n >= bytes.Count(out, []byte("\n")) {
		t.Errorf("export --until --mcp-server: %d calls of %d", n, bytes.Count(out, []byte("\n")))
	}
}
