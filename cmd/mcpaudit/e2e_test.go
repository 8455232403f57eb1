package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMain lets the test binary run as the mcpaudit command itself, so that
// the end-to-end tests start real processes of the code under test without
// a separate build.
func TestMain(m *testing.M) {
	if os.Getenv("MCPAUDIT_AS_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// proc is a running mcpaudit process.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr strings.Builder
}

// startProc starts mcpaudit with args and waits until a line of its stderr
// matches re; it returns the process and the submatches.
func startProc(t *testing.T, re string, args ...string) (*proc, []string) {
	t.Helper()
	p := &proc{cmd: exec.Command(os.Args[0], args...)}
	p.cmd.Env = append(os.Environ(), "MCPAUDIT_AS_MAIN=1")
	errPipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
		}
	})
	rx := regexp.MustCompile(re)
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(errPipe)
		sent := false
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := rx.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m[1:]
				sent = true
			}
		}
	}()
	select {
	case v := <-found:
		return p, v
	case <-time.After(20 * time.Second):
		p.mu.Lock()
		defer p.mu.Unlock()
		t.Fatalf("mcpaudit %v did not print %q:\n%s", args, re, p.stderr.String())
	}
	return nil, nil
}

// doneWhenScript is the script: create two documents, then
// read-patch-read-patch the same operations on the first under a new
// request_id, and read-patch-read once on the second.
func doneWhenScript(t *testing.T, cs *mcp.ClientSession, prefix string) (first string) {
	t.Helper()
	ctx := context.Background()
	call := func(tool string, args map[string]any) map[string]any {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if res.IsError {
			t.Fatalf("%s refused: %+v", tool, res.StructuredContent)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var m map[string]any
		json.Unmarshal(b, &m)
		return m
	}
	docs := []string{"team/" + prefix + "-plan.gram", "team/" + prefix + "-notes.gram"}
	for _, p := range docs {
		call("gram_create", map[string]any{"path": p, "content": "# " + p})
	}
	patch := func(path string, ops []map[string]any, rid string) {
		id := call("gram_read", map[string]any{"path": path})
		call("gram_patch", map[string]any{"path": path, "base_revision": id["rev"], "expected_hash": id["hash"],
			"request_id": rid, "operations": ops})
	}
	ops := []map[string]any{{"op": "append_block", "target": "h0-1", "text": "Decision: ship on Friday"}, {"op": "set_field", "target": "h1-2", "text": "status: approved"}}
	patch(docs[0], ops, prefix+"-req-1")
	patch(docs[0], ops, prefix+"-req-2") // the same operations under a new request_id
	patch(docs[1], []map[string]any{{"op": "insert_after", "target": "h2-3", "text": "one edit"}}, prefix+"-req-3")
	call("gram_read", map[string]any{"path": docs[1]})
	return docs[0]
}

// TestDoneWhen is the acceptance test: a go-sdk client through
// `proxy` in front of `demo server --dialect thegram` and through `wrap`
// around `demo server --stdio`; `serve` then reports exactly one
// double_applied_write, on the first document, for each transport.
func TestDoneWhen(t *testing.T) {
	t.Parallel() // processes on data dirs and ports of their own
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "mcpaudit.yaml")
	// Each transport's calls reach the collector in order: a short
	// lateness bound makes the findings come in seconds.
	os.WriteFile(cfgFile, []byte("detect:\n  lateness: 2s\n"), 0o644)
	_, m := startProc(t, `"msg":"mcpaudit serving".*"ingest":"([^"]+)".*"api":"([^"]+)"`, "serve", "--config", cfgFile,
		"--data-dir", filepath.Join(dir, "data"), "--ingest-listen", "127.0.0.1:0", "--grpc-listen", "", "--api-listen", "127.0.0.1:0")
	ingest, api := "http://"+m[0], "http://"+m[1]
	_, m = startProc(t, `on http://([^/]+)/mcp`, "demo", "server", "--dialect", "thegram", "--listen", "127.0.0.1:0")
	upstream := "http://" + m[0]
	proxyProc, m := startProc(t, `"msg":"mcpaudit proxy".*"listen":"([^"]+)"`, "proxy", "--listen", "127.0.0.1:0",
		"--upstream", upstream, "--server", "thegram-http", "--collector", ingest, "--buffer-dir", filepath.Join(dir, "buf-proxy"))
	front := "http://" + m[0] + "/mcp"

	ctx := context.Background()
	c := mcp.NewClient(&mcp.Implementation{Name: "done-when", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: front}, nil)
	if err != nil {
		t.Fatal(err)
	}
	firstHTTP := doneWhenScript(t, cs, "http")
	cs.Close()

	wrapCmd := exec.Command(os.Args[0], "wrap", "--server", "thegram-stdio", "--collector", ingest,
		"--buffer-dir", filepath.Join(dir, "buf-wrap"), "--log-file", filepath.Join(dir, "wrap.log"),
		"--", os.Args[0], "demo", "server", "--dialect", "thegram", "--stdio")
	wrapCmd.Env = append(os.Environ(), "MCPAUDIT_AS_MAIN=1")
	cs, err = c.Connect(ctx, &mcp.CommandTransport{Command: wrapCmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	firstStdio := doneWhenScript(t, cs, "stdio")
	if err := cs.Close(); err != nil {
		t.Logf("closing the stdio session: %v", err)
	}
	// The proxy sends what it buffered when it stops.
	proxyProc.cmd.Process.Signal(syscall.SIGTERM)
	proxyProc.cmd.Wait()

	type finding struct {
		Kind, Server, Document string
	}
	fetch := func() []finding {
		resp, err := http.Get(api + "/api/v1/findings?limit=100")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var page struct{ Findings []finding }
		if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
			t.Fatal(err)
		}
		return page.Findings
	}
	deadline := time.Now().Add(60 * time.Second)
	var got []finding
	for time.Now().Before(deadline) {
		if got = fetch(); len(got) >= 2 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	// Anything else would come within the same watermark step.
	time.Sleep(3 * time.Second)
	got = fetch()
	t.Logf("findings: %+v", got)
	want := map[finding]bool{
		{"double_applied_write", "thegram-http", firstHTTP}:   true,
		{"double_applied_write", "thegram-stdio", firstStdio}: true,
	}
	if len(got) != len(want) {
		t.Fatalf("findings %+v, want exactly %v", got, want)
	}
	for _, f := range got {
		if !want[f] {
			t.Errorf("finding %+v, want one of %v", f, want)
		}
		delete(want, f)
	}
	wlog, _ := os.ReadFile(filepath.Join(dir, "wrap.log"))
	if strings.Contains(string(wlog), `"level":"ERROR"`) {
		t.Errorf("wrap logged errors:\n%s", wlog)
	}
}
