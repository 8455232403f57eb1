package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/proxy"
	"github.com/mcpaudit/mcpaudit/collector/tap"
)

// TestProxy_CutManyWithOneAnswered (rev19p, reviewing px19's Cut): with a
// hung upstream, a stop that cuts 100 calls in flight records each once,
// canceled, and counts them; a call whose answer the upstream already sent
// on its SSE stream (the stream still open) is recorded answered, not
// canceled: the agent may have read the answer. Real HTTP servers; the
// upstream is a hand-written SSE server, as a hung one must be.
func TestProxy_CutManyWithOneAnswered(t *testing.T) {
	const hung = 100
	var started sync.WaitGroup
	started.Add(hung + 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		if bytes.Contains(body, []byte(`"id":0,`)) {
			// Answered, and the stream held open after the answer.
			fmt.Fprint(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"content\":[]}}\n\n")
		}
		w.(http.Flusher).Flush()
		started.Done()
		<-r.Context().Done()
	}))
	defer up.Close()
	cfg := proxy.NewDefaultConfig()
	cfg.Upstream, cfg.Server = up.URL, "thegram"
	var mu sync.Mutex
	var recs []*tap.Record
	p, err := proxy.New(cfg, func(r *tap.Record) {
		mu.Lock()
		recs = append(recs, r)
		mu.Unlock()
	}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	defer front.Close()
	var clients sync.WaitGroup
	for i := range hung + 1 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			call := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"hang","arguments":{}}}`, i)
			req, _ := http.NewRequest(http.MethodPost, front.URL+"/mcp", strings.NewReader(call))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Session-Id", "s1")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	started.Wait()
	// The answered call's event has been read by the proxy once its
	// record is emitted.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(recs)
		mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records before the cut; want the answered one", n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cut := p.Cut(ctx, front.CloseClientConnections)
	clients.Wait()
	left := p.Close()
	if cut != hung || left != 0 {
		t.Errorf("Cut recorded %d calls, Close %d; want %d and 0", cut, left, hung)
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]int{}
	for _, r := range recs {
		seen[string(r.Request)]++
		answered := bytes.Contains(r.Request, []byte(`"id":0,`))
		switch {
		case answered && (r.Response == nil || r.TransportError != ""):
			t.Errorf("the answered call was recorded %q without its answer", r.TransportError)
		case !answered && (r.Response != nil || r.TransportError != tap.ErrCanceled):
			t.Errorf("a cut call was recorded %q, answer %s; want canceled", r.TransportError, r.Response)
		}
	}
	if len(recs) != hung+1 || len(seen) != hung+1 {
		t.Errorf("%d records of %d calls; want each of the %d once", len(recs), len(seen), hung+1)
	}
}
