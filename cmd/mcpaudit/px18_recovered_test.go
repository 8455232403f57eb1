package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProxy_Kill9RecoveredCallJudgedUnderItsSource (prox17): two proxies
// of one server on one buffer directory, posting to a real serve. An agent
// sends a gram_patch through proxy A, which is killed with SIGKILL while
// the patch is in flight and not restarted; the agent retries the same
// edit through proxy B under a new request_id, with no read between. B's
// sender recovers A's journal (its 5 s scan) and sends the patch without
// a response: serve must judge it, so that the retry is an unsafe_retry,
// and store it under A's source, not B's. Before, B sent it under its own
// source (the call was still judged, dated behind B's clock; the finding
// came, but serve and `mcpaudit calls` named the relay that never carried
// it), and so the answered read left in A's open segment.
func TestProxy_Kill9RecoveredCallJudgedUnderItsSource(t *testing.T) {
	t.Parallel() // proxies and a serve of its own; waits for the journal scan
	seen := make(chan string, 10)
	release := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost {
			return
		}
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		json.Unmarshal(b, &m)
		seen <- string(m.ID)
		if string(m.ID) == `"held"` {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"isError":false,"content":[],"structuredContent":{"path":"team/a.gram","rev":5,"hash":"h5"}}}`))
	}))
	defer upstream.Close()
	defer close(release)

	api, ingest, serveLog := serveInTest(t)

	bufDir := filepath.Join(t.TempDir(), "buf")
	var childLog lockedBuffer
	start := proxyStarter(t, upstream.URL, "thegram", "http://"+ingest, bufDir, &childLog)
	call := func(addr, id, body string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":"`+id+`","method":"tools/call","params":`+body+`}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Mcp-Session-Id", "s-1")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	patch := func(key string) string {
		return `{"name":"gram_patch","arguments":{"path":"team/a.gram","base_revision":4,"expected_hash":"h4","request_id":"` + key +
			`","operations":[{"op":"append_block","target":"h2-1","content":"x"}]}}`
	}
	addrA, addrB := freePort(t), freePort(t)
	a, b := start(addrA), start(addrB)
	defer func() { b.Process.Signal(os.Kill); b.Wait() }()
	sourceA, sourceB := "calls:proxy/thegram/"+hostname()+":"+port2(addrA), "calls:proxy/thegram/"+hostname()+":"+port2(addrB)

	call(addrA, "read", `{"name":"gram_read","arguments":{"path":"team/a.gram"}}`)
	<-seen
	go call(addrA, "held", patch("k-1"))
	if id := <-seen; id != `"held"` {
		t.Fatalf("the upstream got %s, want the held patch", id)
	}
	a.Process.Signal(os.Kill)
	a.Wait()
	call(addrB, "retry", patch("k-2"))
	<-seen

	var found []struct {
		Kind  string   `json:"kind"`
		Calls []string `json:"calls"`
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		var page struct {
			Findings []struct {
				Kind  string   `json:"kind"`
				Calls []string `json:"calls"`
			} `json:"findings"`
		}
		getJSON(t, "http://"+api+"/api/v1/findings?kind=unsafe_retry&limit=10", &page)
		if found = page.Findings; len(found) > 0 {
			break
		}
		if time.Now().After(deadline) {
			var calls bytes.Buffer
			resp, _ := http.Get("http://" + api + "/api/v1/calls?limit=20")
			if resp != nil {
				io.Copy(&calls, resp.Body)
				resp.Body.Close()
			}
			t.Fatalf("no unsafe_retry after 60 s: the patch in flight at the kill was not judged\ncalls: %s\nproxies:\n%s\nserve:\n%s", calls.String(), childLog.String(), serveLog.String())
		}
	}
	var page struct {
		Calls []struct {
			CallID  string `json:"call_id"`
			Tool    string `json:"tool"`
			Outcome string `json:"outcome"`
			Source  string `json:"source"`
			Type    string `json:"type"`
		} `json:"calls"`
	}
	getJSON(t, "http://"+api+"/api/v1/calls?limit=50", &page)
	var held string
	for _, c := range page.Calls {
		if c.Type == "call" && c.Tool == "gram_read" && c.Source != sourceA {
			t.Errorf("the read A answered in its last second (in its open segment at the kill) is stored under source %q; want A's, %q", c.Source, sourceA)
		}
		if c.Type == "call" && c.Tool == "gram_patch" && c.Outcome == "no_response" {
			held = c.CallID
			if c.Source != sourceA {
				t.Errorf("the patch in flight at A's kill is stored under source %q; want A's, %q (B is %q)", c.Source, sourceA, sourceB)
			}
		}
	}
	t.Logf("A %s, B %s, calls %+v", sourceA, sourceB, page.Calls)
	if held == "" || !strings.Contains(strings.Join(found[0].Calls, " "), held) {
		t.Errorf("unsafe_retry %+v; want it to cite the recovered patch %q\ncalls: %+v", found, held, page.Calls)
	}
	if resp, err := http.Get("http://" + api + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "mcpaudit_pipeline_late_calls_total") {
				t.Log(l)
			}
		}
	}
}

func port2(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }
