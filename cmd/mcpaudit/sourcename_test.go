package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestSourceName_LoggedAsServeNamesIt: the proxy logs its source as serve's
// status and calls name it (calls:proxy/...), so that the name logged
// finds its calls with `calls --source`; and a name without its carrier
// (calls: or otlp:) that finds nothing is told how sources are named.
// Found by op19 (D4): the proxy logged proxy/thegram/vm:19251, status named
// calls:proxy/thegram/vm:19251, and `calls --source proxy/...` printed "0
// calls" with no hint. A real serve and a real proxy (a child process).
func TestSourceName_LoggedAsServeNamesIt(t *testing.T) {
	api, ingest, _ := serveInTest(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":"w1","result":{"content":[{"type":"text","text":"ok"}]}}`)
	}))
	defer upstream.Close()
	var proxyLog lockedBuffer
	addr := freePort(t)
	p := proxyStarter(t, upstream.URL, "thegram", "http://"+ingest, filepath.Join(t.TempDir(), "buf"), &proxyLog)(addr)
	defer func() { p.Process.Signal(os.Interrupt); p.Wait() }()
	resp, err := http.Post("http://"+addr+"/mcp", "application/json", strings.NewReader(
		`{"jsonrpc":"2.0","id":"w1","method":"tools/call","params":{"name":"vault_write","arguments":{"path":"a.md"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// The child logs JSON (a terminal gets text: source=...).
	m := regexp.MustCompile(`"source":"([^"]+)"`).FindStringSubmatch(proxyLog.String())
	if m == nil {
		t.Fatalf("the proxy logged no source:\n%s", proxyLog.String())
	}
	logged := m[1]
	if !strings.HasPrefix(logged, "calls:proxy/thegram/") {
		t.Errorf("the proxy logged source=%s; want it as serve names it, calls:proxy/thegram/...", logged)
	}
	calls := func(source string) (stdout, stderr string) {
		var out, errs bytes.Buffer
		if code := run(context.Background(), []string{"calls", "--api-url", "http://" + api, "--source", source}, nil, &out, &errs); code != 0 {
			t.Fatalf("calls --source %s: exit %d: %s", source, code, errs.String())
		}
		return out.String(), errs.String()
	}
	// The proxy posts its records in the background: wait for the call.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, errs := calls(logged); strings.HasPrefix(errs, "1 call\n") {
			break
		}
		if time.Now().After(deadline) {
			_, errs := calls(logged)
			t.Fatalf("calls --source %s (the name the proxy logged): %q; want its call\nproxy:\n%s", logged, errs, proxyLog.String())
		}
	}
	bare := strings.TrimPrefix(logged, "calls:")
	_, errs := calls(bare)
	if !strings.HasPrefix(errs, "0 calls") || !strings.Contains(errs, "calls:"+bare) {
		t.Errorf("calls --source %s (no carrier) said %q; want 0 calls and the hint naming calls:%s", bare, errs, bare)
	}
}
