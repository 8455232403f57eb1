package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestServe_AnswersWhileTheIndexIsRebuilt: a serve whose store must rebuild
// its call id index (here deleted, as the runbooks say to do with a damaged
// one) answers on its API listener while it does: /healthz 200, /readyz
// 503 saying the store is opening and how far the build got, the API 503
// with Retry-After; the ingest listener is not open yet. Once the store is
// open, /readyz is 200 and the API answers from the rebuilt index.
//
// The rebuild is held at its first progress report (testHookOpenProgress)
// while the test asks, so nothing depends on how long it takes. Without
// the early listener, /healthz is refused there.
func TestServe_AnswersWhileTheIndexIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	// The calls in the table, from which the id index is built (in call
	// logs, the default since dflt51 for a new data dir, there is none).
	cfg := autoConfig(t, dir, sqlite.CallsSQLite)
	cfg.Serve.GRPCListen = ""
	cfg.Serve.IngestListen, cfg.Serve.APIListen = freePort(t), freePort(t)
	s, err := startServer(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	postAs(t, s.ingestAddr, "test", ndjson(mergedCapture(t)))
	var before struct {
		Calls []json.RawMessage `json:"calls"`
	}
	getJSON(t, "http://"+s.apiAddr+"/api/v1/calls?limit=1000", &before)
	if len(before.Calls) == 0 {
		t.Fatal("no call stored")
	}
	if err := s.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(sqlite.IDIndexDir(filepath.Join(dir, storeFile))); err != nil {
		t.Fatal(err)
	}

	held := make(chan sqlite.Progress, 1)
	release := make(chan struct{})
	testHookOpenProgress = func(addr string, p sqlite.Progress) {
		if addr != cfg.Serve.APIListen {
			return // another test's serve
		}
		select {
		case held <- p:
			<-release
		default:
		}
	}
	defer func() { testHookOpenProgress = nil }()
	type started struct {
		s   *server
		err error
	}
	done := make(chan started, 1)
	go func() {
		s, err := startServer(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		done <- started{s, err}
	}()
	var p sqlite.Progress
	select {
	case p = <-held:
	case r := <-done:
		t.Fatalf("serve started without building the index: %v", r.err)
	}
	if p.Step != "building the call id index" || p.Total != int64(len(before.Calls)) || p.Done != 0 {
		t.Errorf("first progress %+v, want the build of the id index at 0 of %d calls", p, len(before.Calls))
	}

	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get("http://" + cfg.Serve.APIListen + path)
		if err != nil {
			t.Fatalf("GET %s while the index is built: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, body := get("/healthz"); resp.StatusCode != 200 || body != "ok\n" {
		t.Errorf("/healthz while the index is built: %d %q, want 200 ok", resp.StatusCode, body)
	}
	wantReady := "store not ready: opening the store: building the call id index: 0 of " + strconv.Itoa(len(before.Calls)) + " calls (0%)\n"
	if resp, body := get("/readyz"); resp.StatusCode != 503 || body != wantReady {
		t.Errorf("/readyz while the index is built: %d %q, want 503 %q", resp.StatusCode, body, wantReady)
	}
	for _, path := range []string{"/api/v1/findings", "/api/v1/documents/timeline?name=x", "/metrics", "/"} {
		resp, body := get(path)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != openingRetryAfter || !strings.Contains(body, "mcpaudit is starting (opening the store: building the call id index") {
			t.Errorf("%s while the index is built: %d Retry-After %q %q, want 503 with Retry-After saying it starts",
				path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if strings.HasPrefix(path, "/api/") {
			var e map[string]string
			if err := json.Unmarshal([]byte(body), &e); err != nil || e["error"] == "" {
				t.Errorf("%s while the index is built: %q is not {\"error\": ...}", path, body)
			}
		}
	}
	// Ingest is not open: a sender's retry finds the collector when its
	// store can take what it acknowledges.
	if c, err := net.Dial("tcp", cfg.Serve.IngestListen); err == nil {
		c.Close()
		t.Error("the ingest listener accepts connections while the index is built")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dialing ingest while the index is built: %v, want connection refused", err)
	}

	close(release)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r.s.shutdown(ctx)
	})
	if resp, body := get("/readyz"); resp.StatusCode != 200 || body != "ready\n" {
		t.Errorf("/readyz once started: %d %q, want 200 ready", resp.StatusCode, body)
	}
	var after struct {
		Calls []json.RawMessage `json:"calls"`
	}
	getJSON(t, "http://"+cfg.Serve.APIListen+"/api/v1/calls?limit=1000", &after)
	if len(after.Calls) != len(before.Calls) {
		t.Errorf("%d calls once started, want the %d stored", len(after.Calls), len(before.Calls))
	}
	// A call found by its id: through the rebuilt index.
	var first struct {
		ID string `json:"call_id"`
	}
	json.Unmarshal(before.Calls[0], &first)
	if resp, body := get("/api/v1/calls/" + first.ID); resp.StatusCode != 200 {
		t.Errorf("call %s once started: %d %s", first.ID, resp.StatusCode, body)
	}
	if _, err := os.Stat(sqlite.IDIndexDir(filepath.Join(dir, storeFile))); err != nil {
		t.Errorf("the id index was not built: %v", err)
	}
	// And ingest is open.
	postAs(t, r.s.ingestAddr, "test", ndjson(mergedCapture(t)[:1]))
}

// storedWithoutIndex returns a data directory and its configuration whose
// store holds the merged capture and has no id index: the next start builds
// it, reporting its progress.
func storedWithoutIndex(t *testing.T) (string, Config) {
	t.Helper()
	dir := t.TempDir()
	// The calls in the table: the id index is built from it (calls in
	// call logs, the default since dflt51 for a new data dir, have no id
	// index to build, and a stop waiting for its build waited forever).
	cfg := autoConfig(t, dir, sqlite.CallsSQLite)
	s, err := startServer(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	postAs(t, s.ingestAddr, "test", ndjson(mergedCapture(t)))
	if err := s.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(sqlite.IDIndexDir(filepath.Join(dir, storeFile))); err != nil {
		t.Fatal(err)
	}
	return dir, cfg
}

// TestServe_StoppedWhileOpeningExitsClean: a stop (SIGTERM, Ctrl-C) that
// comes while the store opens (here at the first progress report of the
// id index's build, the runbooks' cure for a damaged index) is a stop, not
// a failure: serve breaks the build off, saying so, and exits 0, the store
// closed; the next start builds the index and serves every call. Before,
// it exited 2 with "cannot read the watermark: ... context canceled", as a
// store that cannot be read; and then, exiting 0, it first finished the
// build, minutes on a large store.
func TestServe_StoppedWhileOpeningExitsClean(t *testing.T) {
	dir, cfg := storedWithoutIndex(t)

	api := freePort(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stopped sqlite.Progress
	testHookOpenProgress = func(addr string, p sqlite.Progress) {
		if addr == api && stopped.Step == "" {
			stopped = p
			stop() // as signal.NotifyContext does on SIGTERM
		}
	}
	defer func() { testHookOpenProgress = nil }()
	var stderr strings.Builder
	err := serveCommand(ctx, []string{"--data-dir", dir, "--api-listen", api, "--ingest-listen", "127.0.0.1:0", "--grpc-listen", ""}, &stderr)
	if stopped.Step == "" {
		t.Fatalf("the store opened without building its id index (%v)", err)
	}
	if err != nil {
		t.Fatalf("serve stopped while %q: %v, want a clean exit; log:\n%s", stopped.Step, err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "stopped while starting") {
		t.Errorf("the log does not say serve stopped while starting:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "store open interrupted by signal") ||
		!strings.Contains(stderr.String(), "building the call id index interrupted") {
		t.Errorf("the log does not say the stop broke off the index's build:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "built the call id index") {
		t.Errorf("serve finished building the id index before it stopped:\n%s", stderr.String())
	}

	// The data dir and the store are released, and whole.
	s, err := startServer(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("start after a stop while opening: %v", err)
	}
	defer s.shutdown(context.Background())
	var calls struct {
		Calls []json.RawMessage `json:"calls"`
	}
	getJSON(t, "http://"+s.apiAddr+"/api/v1/calls?limit=1000", &calls)
	if n := len(mergedCapture(t)); len(calls.Calls) != n {
		t.Errorf("%d calls after the restart, want the %d stored", len(calls.Calls), n)
	}
}

// TestServe_SIGHUPWhileOpening: SIGHUP, serve's reload signal (the tokens
// file, the TLS certificate), may come while the store opens, as from a
// certificate rotation: the API listener already serves. It is taken as
// the reload it is, once serve is up, and does not end the process. Before,
// serve listened for it only once started, and SIGHUP's default action
// killed it in the middle of the id index's build (exit 129; a migration
// would have been rolled back, and begun again at the next start).
func TestServe_SIGHUPWhileOpening(t *testing.T) {
	dir, _ := storedWithoutIndex(t)

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServe$")
	cmd.Env = append(os.Environ(), "MCPAUDIT_CHILD_DATA_DIR="+dir, "MCPAUDIT_CHILD_HUP_WHILE_OPENING=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var lines []string
	built, serving, reloaded := false, false, false
	sc := bufio.NewScanner(stderr)
	for !(serving && reloaded) && sc.Scan() {
		lines = append(lines, sc.Text())
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		switch m["msg"] {
		case "built the call id index":
			built = true
		case "mcpaudit serving":
			serving = true
		case "credentials reloaded":
			reloaded = true
		}
	}
	if !serving || !reloaded {
		cmd.Process.Kill()
		err := cmd.Wait()
		t.Fatalf("after a SIGHUP while the store opened: serving %v, reloaded %v, the child %v; its log:\n%s",
			serving, reloaded, err, strings.Join(lines, "\n"))
	}
	if !built {
		t.Errorf("the store opened without building its id index: the SIGHUP came at no build; log:\n%s", strings.Join(lines, "\n"))
	}
	go io.Copy(io.Discard, stderr)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v, want a clean exit", err)
	}
}
