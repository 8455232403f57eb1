package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestRelaySourceDefault: the default Mcpaudit-Source that wrap and proxy
// print in their help is the one wrap sends: wrap/<server>/<host>-<pid>.
func TestRelaySourceDefault(t *testing.T) {
	for cmd, want := range map[string]string{"wrap": "wrap/<server>/<host>-<pid>", "proxy": "proxy/<server>/<host>:<port>"} {
		_, _, help := cliRun(cmd, "--help")
		if !strings.Contains(help, "Mcpaudit-Source header (default "+want+")") {
			t.Errorf("%s --help does not give the default source %s:\n%s", cmd, want, help)
		}
	}
	// What wrap sends: a child that answers one tools/call.
	var mu sync.Mutex
	var sources []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sources = append(sources, r.Header.Get("Mcpaudit-Source"))
		mu.Unlock()
		w.Write([]byte(`{"accepted":1,"rejected":0}`))
	}))
	defer hs.Close()
	req := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"a.gram"}}}` + "\n"
	child := `read l; echo '{"jsonrpc":"2.0","id":1,"result":{"content":[]}}'`
	var out, errb bytes.Buffer
	err := wrapCommand(context.Background(), []string{"--server", "thegram", "--collector", hs.URL,
		"--buffer-dir", filepath.Join(t.TempDir(), "buf"), "--", "sh", "-c", child}, strings.NewReader(req), &out, &errb)
	if err != nil {
		t.Fatalf("wrap: %v\n%s", err, errb.String())
	}
	want := "wrap/thegram/" + hostname() + "-" + strconv.Itoa(os.Getpid())
	mu.Lock()
	defer mu.Unlock()
	if len(sources) == 0 || sources[0] != want {
		t.Errorf("wrap sent Mcpaudit-Source %q, want %q", sources, want)
	}
}

// TestWrapLog_StartAndExit: the wrapper's --log-file says that it started,
// for which server and source and where the records go, and how the child
// ended, as the proxy's log says it started: an operator who opens the log
// of a wrapper that worked finds more than an empty file.
func TestWrapLog_StartAndExit(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"accepted":0,"rejected":0}`))
	}))
	defer hs.Close()
	logFile := filepath.Join(t.TempDir(), "wrap.log")
	var out, errb bytes.Buffer
	err := wrapCommand(context.Background(), []string{"--server", "thegram", "--collector", hs.URL, "--source", "wrap/test",
		"--buffer-dir", filepath.Join(t.TempDir(), "buf"), "--log-file", logFile, "--", "sh", "-c", "exit 3"}, strings.NewReader(""), &out, &errb)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 3 {
		t.Fatalf("wrap of a child exiting 3: %v, want exit status 3", err)
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	for _, want := range []string{`"msg":"mcpaudit wrap"`, `"server":"thegram"`, `"source":"calls:wrap/test"` /* as serve names it (op19b) */, `"collector":"` + hs.URL, `"command":"sh"`,
		`"msg":"child exited"`, `"status":3`} {
		if !strings.Contains(log, want) {
			t.Errorf("the wrapper's log lacks %s:\n%s", want, log)
		}
	}
	if errb.Len() != 0 || out.Len() != 0 {
		t.Errorf("the wrapper wrote to stdout or stderr: %q %q", out.String(), errb.String())
	}
}
