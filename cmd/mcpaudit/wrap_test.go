package main

import (
	"bytes"
	"context"
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
	for cmd, want := range map[string]string{"wrap": "wrap/<server>/<host>-<pid>", "proxy": "proxy/<server>/<host>"} {
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
