package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestHelperProxy is not a test: it is the child process of
// TestProxy_Kill9KeepsCallInFlight, running mcpaudit proxy with the
// arguments of MCPAUDIT_CHILD_PROXY_ARGS until it is killed.
func TestHelperProxy(t *testing.T) {
	raw := os.Getenv("MCPAUDIT_CHILD_PROXY_ARGS")
	if raw == "" {
		t.Skip("only runs as the child of TestProxy_Kill9KeepsCallInFlight")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run(ctx, append([]string{"proxy"}, args...), nil, os.Stdout, os.Stderr)
}

// TestProxy_Kill9KeepsCallInFlight (prox16, failing on main beb93e9): a
// proxy killed with SIGKILL while a tools/call is in flight loses that call.
// The agent sees its request break (EOF: the outcome is unknown to it, the
// upstream may have applied the write), yet no record of the call ever
// reaches the collector, not even after the proxy is restarted on the same
// buffer dir: the record is appended to the buffer only when the exchange
// ends. docs/proxy.md says "a process crash loses none" (of the records
// appended) and names "(none, and no response)" for a proxy that stopped
// with the call in flight, which a graceful stop records; a crash records
// nothing. The audit then cannot see the agent's next step as a retry after
// an uncertain outcome. Outside: 3 of 2,436 calls in flight at the kill
// were lost (/tmp/prox16, case 3). To pass, the proxy would have to
// write the request ahead (and the collector take a call with no response
// and no transport error as unknown), or docs/proxy.md would have to say
// the loss and the test be changed to assert it.
func TestProxy_Kill9KeepsCallInFlight(t *testing.T) {
	if os.Getenv("MCPAUDIT_PROX16") == "" {
		t.Skip("prox16: fails on main (beb93e9): the call in flight at the proxy's kill -9 is never recorded; remove this skip with the fix or the documented loss (MCPAUDIT_PROX16=1 runs it)")
	}
	release := make(chan struct{})
	got := make(chan string, 10)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		json.Unmarshal(b, &m)
		got <- string(m.ID)
		if string(m.ID) == `"held"` {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"content":[]}}`))
	}))
	defer upstream.Close()
	defer close(release)

	var mu sync.Mutex
	recorded := map[string]string{} // JSON-RPC id -> transport_error
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		n := 0
		sc := bufio.NewScanner(body)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var rec struct {
				Request struct {
					ID json.RawMessage `json:"id"`
				} `json:"request"`
				TransportError string `json:"transport_error"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil {
				mu.Lock()
				recorded[string(rec.Request.ID)] = rec.TransportError
				mu.Unlock()
				n++
			}
		}
		w.Write([]byte(`{"accepted":` + itoa(n) + `,"rejected":0}`))
	}))
	defer collector.Close()

	addr := freePort(t)
	args, _ := json.Marshal([]string{"--listen", addr, "--upstream", upstream.URL, "--server", "vault",
		"--collector", collector.URL, "--buffer-dir", filepath.Join(t.TempDir(), "buf")})
	var childLog lockedBuffer // both proxies' stderr
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProxy$")
		cmd.Env = append(os.Environ(), "MCPAUDIT_CHILD_PROXY_ARGS="+string(args))
		cmd.Stderr = &childLog
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	call := func(id string) error {
		resp, err := http.Post("http://"+addr+"/mcp", "application/json", strings.NewReader(
			`{"jsonrpc":"2.0","id":"`+id+`","method":"tools/call","params":{"name":"vault_write","arguments":{"path":"a"}}}`))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	waitUp := func() {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if c, err := (&http.Client{Timeout: time.Second}).Get("http://" + addr + "/"); err == nil {
				c.Body.Close()
				return
			}
		}
		t.Fatalf("the proxy did not start:\n%s", childLog.String())
	}

	p := start()
	waitUp()
	if err := call("done"); err != nil {
		t.Fatalf("a call before the kill: %v", err)
	}
	<-got
	broke := make(chan error, 1)
	go func() { broke <- call("held") }()
	<-got // the held call reached the upstream: it is in flight
	p.Process.Signal(os.Kill)
	p.Wait()
	if err := <-broke; err == nil {
		t.Fatal("the held call completed though the proxy was killed under it")
	}

	p = start()
	defer func() { p.Process.Signal(os.Kill); p.Wait() }()
	waitUp()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		_, held := recorded[`"held"`]
		_, done := recorded[`"done"`]
		mu.Unlock()
		if held && done {
			return
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Errorf("after a kill -9 and a restart, the collector got records for ids %v; want both \"done\" and the call in flight at the kill, \"held\" (its outcome unknown): a call the agent saw break is not audited\nthe proxies' logs:\n%s", keys(recorded), childLog.String())
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func keys(m map[string]string) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	return s
}
