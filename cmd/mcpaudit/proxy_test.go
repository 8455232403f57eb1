package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestProxyFlags_ErrorsNameTheFlags: the proxy has flags, not a config file,
// so a bad or missing value is named by its flag, once.
func TestProxyFlags_ErrorsNameTheFlags(t *testing.T) {
	f := func(args []string, want ...string) {
		t.Helper()
		code, _, errOut := cliRun(append([]string{"proxy", "--collector", "http://127.0.0.1:1"}, args...)...)
		if code != 2 {
			t.Errorf("proxy %v: exit %d, want 2", args, code)
		}
		if strings.Contains(errOut, "proxy.") {
			t.Errorf("proxy %v names a config key the operator never wrote:\n%s", args, errOut)
		}
		for _, w := range want {
			if strings.Count(errOut, w) != 1 {
				t.Errorf("proxy %v: want %q once in:\n%s", args, w, errOut)
			}
		}
	}
	f(nil, "--upstream: required", "--server: required")
	f([]string{"--server", "thegram", "--upstream", "127.0.0.1:9000"}, `--upstream: "127.0.0.1:9000" is not an http or https URL`)
	f([]string{"--server", "thegram", "--upstream", "http://127.0.0.1:9000", "--response-timeout", "-1s"}, "--response-timeout: must not be negative")
}

// TestProxySourceNamesItsPort: two proxies of one server on one host send
// different Mcpaudit-Source names by default (proxy/SERVER/HOST:PORT), so
// that the collector keeps a clock for each: with one name, the calls of
// the proxy that delivers behind the other counted as late.
func TestProxySourceNamesItsPort(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`))
	}))
	defer upstream.Close()
	var mu sync.Mutex
	got := map[string]bool{}
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("Mcpaudit-Source")] = true
		mu.Unlock()
		w.Write([]byte(`{"accepted":1,"rejected":0}`))
	}))
	defer collector.Close()

	want := map[string]bool{}
	for i := range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		ctx, cancel := context.WithCancel(context.Background())
		var errb lockedBuffer
		done := make(chan error, 1)
		go func() {
			done <- proxyCommand(ctx, []string{"--listen", addr, "--upstream", upstream.URL, "--server", "thegram",
				"--collector", collector.URL, "--buffer-dir", filepath.Join(t.TempDir(), "buf"+strconv.Itoa(i))}, &errb)
		}()
		var resp *http.Response
		for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(20 * time.Millisecond) {
			resp, err = http.Post("http://"+addr+"/mcp", "application/json",
				strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"a.gram"}}}`))
			if err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("proxy %d never answered: %v\n%s", i, err, errb.String())
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("proxy %d: %v\n%s", i, err, errb.String())
		}
		_, port, _ := net.SplitHostPort(addr)
		want["proxy/thegram/"+hostname()+":"+port] = true
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the collector got sources %v, want %v", got, want)
	}
}

// TestProxyClosesListenerOnError: the proxy listens before it opens its
// metrics listener and its sink; when one of those fails, its own listen
// address is free again (found in review: it stayed bound).
func TestProxyClosesListenerOnError(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	err = proxyCommand(context.Background(), []string{"--listen", addr, "--upstream", "http://127.0.0.1:1", "--server", "thegram",
		"--collector", "http://127.0.0.1:1", "--metrics-listen", busy.Addr().String(),
		"--buffer-dir", filepath.Join(t.TempDir(), "buf")}, &lockedBuffer{})
	if err == nil {
		t.Fatal("want an error: the metrics address is taken")
	}
	again, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("after proxyCommand failed, its listen address %s is still held: %v", addr, err)
	}
	again.Close()
}
