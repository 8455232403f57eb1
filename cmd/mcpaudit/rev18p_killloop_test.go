package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestProxy_Kill9LoopNothingAcknowledgedLost (rev18p): two proxies of one
// server on one buffer directory post to a real serve; 6 agents call
// through them at once (each call in a session of its own) while proxy A
// is killed with SIGKILL and restarted, 4 rounds; then both stop with
// SIGTERM. Every call an agent got an answer for must be stored at serve.
func TestProxy_Kill9LoopNothingAcknowledgedLost(t *testing.T) {
	if testing.Short() {
		t.Skip("kill loop")
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost {
			return
		}
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		json.Unmarshal(b, &m)
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // calls in flight at a kill
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"isError":false,"content":[]}}`))
	}))
	defer upstream.Close()

	api, ingest, _ := serveInTest(t)
	bufDir := filepath.Join(t.TempDir(), "buf")
	var childLog lockedBuffer
	start := proxyStarter(t, upstream.URL, "thegram", "http://"+ingest, bufDir, &childLog)
	addrs := []string{freePort(t), freePort(t)}
	var pmu sync.Mutex
	procs := []*exec.Cmd{start(addrs[0]), start(addrs[1])}

	var mu sync.Mutex
	acked := map[string]bool{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 5 * time.Second}
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				id := fmt.Sprintf("a%d-%d", g, n)
				req, _ := http.NewRequest(http.MethodPost, "http://"+addrs[n%2]+"/mcp", strings.NewReader(
					`{"jsonrpc":"2.0","id":"`+id+`","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"team/a.gram"}}}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Mcp-Session-Id", "s-"+id)
				resp, err := client.Do(req)
				if err != nil {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"result"`) {
					mu.Lock()
					acked["s-"+id] = true
					mu.Unlock()
				}
			}
		}()
	}
	for range 4 {
		time.Sleep(700 * time.Millisecond)
		pmu.Lock()
		procs[0].Process.Signal(os.Kill)
		procs[0].Wait()
		procs[0] = start(addrs[0])
		pmu.Unlock()
	}
	time.Sleep(300 * time.Millisecond)
	close(done)
	wg.Wait()
	for _, p := range procs {
		p.Process.Signal(syscall.SIGTERM)
		p.Wait()
	}

	stored := map[string]bool{}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		clear(stored)
		cursor := ""
		for {
			var page struct {
				Calls []struct {
					Type    string `json:"type"`
					Session string `json:"session"`
				} `json:"calls"`
				NextCursor string `json:"next_cursor"`
			}
			getJSON(t, "http://"+api+"/api/v1/calls?limit=1000&cursor="+url.QueryEscape(cursor), &page)
			for _, c := range page.Calls {
				if c.Type == "call" {
					stored[c.Session] = true
				}
			}
			if cursor = page.NextCursor; cursor == "" || len(page.Calls) == 0 {
				break
			}
		}
		var lost []string
		mu.Lock()
		for s := range acked {
			if !stored[s] {
				lost = append(lost, s)
			}
		}
		n := len(acked)
		mu.Unlock()
		if len(lost) == 0 {
			t.Logf("%d calls answered to the agents, %d stored at serve", n, len(stored))
			break
		}
		if time.Now().After(deadline) {
			left, _ := filepath.Glob(filepath.Join(bufDir, "*"))
			t.Fatalf("%d of %d answered calls not stored at serve after 60 s (first %v); buffer dir: %v\nproxies:\n%s", len(lost), n, lost[:min(5, len(lost))], left, childLog.String())
		}
	}
}
