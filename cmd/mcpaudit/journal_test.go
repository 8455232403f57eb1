package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHelperWrap is not a test: it is the child process of
// TestWrap_Kill9KeepsCallInFlight, running mcpaudit wrap with the
// arguments of MCPAUDIT_CHILD_WRAP_ARGS until it is killed.
func TestHelperWrap(t *testing.T) {
	runChildCommand(t, "MCPAUDIT_CHILD_WRAP_ARGS", "wrap", os.Stdin)
}

// TestWrap_Kill9KeepsCallInFlight: wrap shares the proxy's journal. A
// wrapper killed with SIGKILL while its child holds a tools/call leaves the
// call in its journal, masked (the journal is in the buffer directory,
// where secrets never go), and the next wrapper on the buffer directory
// records it without a response.
func TestWrap_Kill9KeepsCallInFlight(t *testing.T) {
	const secret = "hunter2-px16-journal"
	var mu sync.Mutex
	var got []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		body, _ := io.ReadAll(zr)
		mu.Lock()
		got = append(got, strings.Split(strings.TrimSpace(string(body)), "\n")...)
		mu.Unlock()
		w.Write([]byte(`{"accepted":1,"rejected":0}`))
	}))
	defer collector.Close()
	buf := filepath.Join(t.TempDir(), "buf")
	// The child reads the call and waits for a line that never comes: its
	// second read ends when the wrapper dies and its stdin closes.
	args, _ := json.Marshal([]string{"--server", "vault", "--collector", collector.URL, "--buffer-dir", buf,
		"--", "sh", "-c", "read l; read l2"})
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWrap$")
	cmd.Env = append(os.Environ(), "MCPAUDIT_CHILD_WRAP_ARGS="+string(args))
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	io.WriteString(in, `{"jsonrpc":"2.0","id":"held","method":"tools/call","params":{"name":"vault_write","arguments":{"path":"a","password":"`+secret+`"}}}`+"\n")
	var journal []byte
	for deadline := time.Now().Add(10 * time.Second); !bytes.Contains(journal, []byte(`"held"`)); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no journal line for the call in flight:\n%s", stderr.String())
		}
		names, _ := filepath.Glob(filepath.Join(buf, "*.journal"))
		journal = nil
		for _, n := range names {
			b, _ := os.ReadFile(n)
			journal = append(journal, b...)
		}
	}
	cmd.Process.Signal(os.Kill)
	cmd.Wait()
	if bytes.Contains(journal, []byte(secret)) || !bytes.Contains(journal, []byte("[redacted:")) {
		t.Errorf("the journal is not masked as records are:\n%s", journal)
	}

	// The next wrapper on the directory (its child ends at once).
	if err := wrapCommand(context.Background(), []string{"--server", "vault", "--collector", collector.URL,
		"--buffer-dir", buf, "--", "true"}, strings.NewReader(""), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var held []string
	for _, l := range got {
		if strings.Contains(l, `"id":"held"`) {
			held = append(held, l)
		}
	}
	if len(held) != 1 || strings.Contains(held[0], `"response"`) || strings.Contains(held[0], `"transport_error"`) || strings.Contains(held[0], secret) {
		t.Errorf("the collector got %q for the call in flight at the kill; want one masked record without a response or transport error\nall: %q", held, got)
	}
	if names, _ := filepath.Glob(filepath.Join(buf, "*.journal")); len(names) != 0 {
		t.Errorf("journals left after a graceful stop: %v", names)
	}
}
