package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestProxy_RetryAfterNotSent runs an agent's gram_patch through `mcpaudit
// proxy` to a collector and the records it got through `analyze`. The
// first call fails; the agent sends the same edit again under a new
// request_id without reading the document. When the proxy could not
// connect to the upstream, nothing was applied: the record says not_sent
// and no unsafe_retry follows. When the upstream read the request and
// reset the connection, the outcome is uncertain: unsafe_retry, as before.
func TestProxy_RetryAfterNotSent(t *testing.T) {
	patch := func(id int, rid string) string {
		return `{"jsonrpc":"2.0","id":` + itoa(id) + `,"method":"tools/call","params":{"name":"gram_patch","arguments":` +
			`{"path":"team/plan.gram","base_revision":4,"expected_hash":"h4","request_id":"` + rid + `",` +
			`"operations":[{"op":"append_block","target":"h0-1","text":"Decision: ship on Friday"}]}}}`
	}
	// thegram answers a patch with the document's new identity; reset
	// makes it read the first request and reset the connection instead.
	thegram := func(reset bool) http.Handler {
		var n atomic.Int32
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			if n.Add(1) == 1 && reset {
				conn, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				conn.(*net.TCPConn).SetLinger(0)
				conn.Close()
				return
			}
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			json.Unmarshal(b, &m)
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"isError":false,"structuredContent":{"path":"team/plan.gram","rev":5,"hash":"h5"},"content":[]}}`))
		})
	}
	// run proxies the two calls and returns the records the collector
	// got (NDJSON) and the transport error of the first.
	run := func(t *testing.T, upstreamAddr string, before func()) ([]byte, string) {
		var mu sync.Mutex
		var got bytes.Buffer
		lines := 0
		collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			b, _ := io.ReadAll(zr)
			n := bytes.Count(b, []byte("\n"))
			mu.Lock()
			got.Write(b)
			lines += n
			mu.Unlock()
			w.Write([]byte(`{"accepted":` + itoa(n) + `,"rejected":0}`))
		}))
		defer collector.Close()
		addr := freePort(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var errb lockedBuffer
		done := make(chan error, 1)
		go func() {
			done <- proxyCommand(ctx, []string{"--listen", addr, "--upstream", "http://" + upstreamAddr, "--server", "thegram",
				"--collector", collector.URL, "--buffer-dir", filepath.Join(t.TempDir(), "buf")}, &errb)
		}()
		call := func(body string) int {
			for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(20 * time.Millisecond) {
				req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/mcp", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Mcp-Session-Id", "s-agent")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					continue // the proxy is not listening yet
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			t.Fatalf("the proxy never answered:\n%s", errb.String())
			return 0
		}
		if code := call(patch(1, "req-1")); code != http.StatusBadGateway {
			t.Fatalf("first call: %d, want 502", code)
		}
		before()
		if code := call(patch(2, "req-2")); code != http.StatusOK {
			t.Fatalf("second call: %d, want 200", code)
		}
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
			mu.Lock()
			n := lines
			mu.Unlock()
			if n >= 2 {
				break
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("proxy: %v\n%s", err, errb.String())
		}
		mu.Lock()
		defer mu.Unlock()
		var first struct {
			TransportError string `json:"transport_error"`
		}
		json.Unmarshal(bytes.SplitN(got.Bytes(), []byte("\n"), 2)[0], &first)
		if lines != 2 {
			t.Fatalf("the collector got %d records, want 2:\n%s", lines, got.String())
		}
		return bytes.Clone(got.Bytes()), first.TransportError
	}
	analyze := func(t *testing.T, records []byte) map[string]int {
		file := filepath.Join(t.TempDir(), "records.ndjson")
		if err := os.WriteFile(file, records, 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := cliRun("analyze", "--format", "json", file)
		if code != 0 && code != 1 {
			t.Fatalf("analyze exit %d:\n%s", code, errOut)
		}
		kinds := map[string]int{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var f struct {
				Kind string `json:"kind"`
			}
			if l != "" && json.Unmarshal([]byte(l), &f) == nil {
				kinds[f.Kind]++
			}
		}
		return kinds
	}

	t.Run("connection refused", func(t *testing.T) {
		port := newRefusedPort(t) // nothing listens there yet, nor can
		var srv *http.Server
		records, te := run(t, port.Addr, func() {
			ln := port.Listen(t)
			srv = &http.Server{Handler: thegram(false)}
			go srv.Serve(ln)
		})
		defer srv.Close()
		if te != "not_sent" {
			t.Fatalf("first call recorded with transport_error %q, want not_sent:\n%s", te, records)
		}
		if kinds := analyze(t, records); len(kinds) != 0 {
			t.Fatalf("findings %v, want none:\n%s", kinds, records)
		}
	})
	t.Run("reset after the request was read", func(t *testing.T) {
		up := httptest.NewServer(thegram(true))
		defer up.Close()
		records, te := run(t, strings.TrimPrefix(up.URL, "http://"), func() {})
		if te != "connection_reset" {
			t.Fatalf("first call recorded with transport_error %q, want connection_reset:\n%s", te, records)
		}
		if kinds := analyze(t, records); kinds["unsafe_retry"] != 1 {
			t.Fatalf("findings %v, want one unsafe_retry:\n%s", kinds, records)
		}
	})
}
