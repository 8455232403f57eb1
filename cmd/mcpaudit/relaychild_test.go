package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// runChildCommand is the body of the helper "tests" that stand for a child
// process: it runs the mcpaudit command sub with the JSON-encoded arguments
// of the environment variable env, until it is signalled or killed. Run as
// an ordinary test (env unset) it skips.
func runChildCommand(t *testing.T, env, sub string, stdin io.Reader) {
	raw := os.Getenv(env)
	if raw == "" {
		t.Skip("only runs as a child process of another test (" + env + ")")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run(ctx, append([]string{sub}, args...), stdin, os.Stdout, os.Stderr)
}

// holdingUpstream is an MCP upstream that answers each POST with an empty
// tool result under the request's id, except the ids held reports: those it
// holds until the test ends or the client goes, so that they are in flight.
// The ids of the POSTs it received come on the returned channel (GETs, such
// as waitUp's, are not calls and are not reported).
func holdingUpstream(t *testing.T, held func(id string) bool, buffer int) (*httptest.Server, <-chan string) {
	release := make(chan struct{})
	seen := make(chan string, buffer)
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
		if held(string(m.ID)) {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"content":[]}}`))
	}))
	t.Cleanup(upstream.Close)
	t.Cleanup(func() { close(release) }) // runs first: held requests end, then Close returns
	return upstream, seen
}

// serveInTest runs serve in this process on a fresh data directory, with
// OTLP/gRPC off, until the test ends, and returns its API and ingest
// addresses once /readyz answers 200, and its log.
func serveInTest(t *testing.T) (api, ingest string, log *lockedBuffer) {
	t.Helper()
	dir := t.TempDir()
	api, ingest = freePort(t), freePort(t)
	ctx, stop := context.WithCancel(context.Background())
	log = new(lockedBuffer)
	served := make(chan error, 1)
	go func() {
		served <- serveCommand(ctx, []string{"--data-dir", dir, "--api-listen", api, "--ingest-listen", ingest, "--grpc-listen", ""}, log)
	}()
	t.Cleanup(func() { stop(); <-served })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + api + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready:\n%s", log.String())
		}
	}
	return api, ingest, log
}

// proxyStarter returns a function that starts `mcpaudit proxy` as a child
// process (TestHelperProxy) on addr, in front of upstream for server,
// posting to collector through bufDir, its stderr into log, and returns
// it once it answers.
func proxyStarter(t *testing.T, upstream, server, collector, bufDir string, log *lockedBuffer) func(addr string) *exec.Cmd {
	return func(addr string) *exec.Cmd {
		t.Helper()
		args, _ := json.Marshal([]string{"--listen", addr, "--upstream", upstream, "--server", server,
			"--collector", collector, "--buffer-dir", bufDir})
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProxy$")
		cmd.Env = append(os.Environ(), "MCPAUDIT_CHILD_PROXY_ARGS="+string(args))
		cmd.Stderr = log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if c, err := (&http.Client{Timeout: time.Second}).Get("http://" + addr + "/"); err == nil {
				c.Body.Close()
				return cmd
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the proxy did not start:\n%s", log.String())
			}
		}
	}
}
