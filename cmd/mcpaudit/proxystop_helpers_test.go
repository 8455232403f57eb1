package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"
)

// stoppingProxy is `mcpaudit proxy` run in the test process with a stop
// grace of its own: cancel does what SIGTERM does (signal.NotifyContext
// cancels the command's context); done gives the command's error.
type stoppingProxy struct {
	addr   string
	log    *lockedBuffer
	cancel context.CancelFunc
	done   chan error
}

// stop begins the stop and returns the command's error once it ends.
func (p stoppingProxy) stop() error {
	p.cancel()
	return <-p.done
}

// startProxy runs the proxy in front of upstream, sending its records to
// collector, with a stop grace of grace (proxyStopGrace, restored when the
// test ends).
func startProxy(t *testing.T, upstream, collector string, grace time.Duration) stoppingProxy {
	t.Helper()
	old := proxyStopGrace
	proxyStopGrace = grace
	t.Cleanup(func() { proxyStopGrace = old })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := stoppingProxy{addr: freePort(t), log: new(lockedBuffer), cancel: cancel, done: make(chan error, 1)}
	go func() {
		p.done <- proxyCommand(ctx, []string{"--listen", p.addr, "--upstream", upstream, "--server", "thegram",
			"--collector", collector, "--buffer-dir", filepath.Join(t.TempDir(), "buf")}, p.log)
	}()
	return p
}

// acceptingCollector is a collector that takes every request and answers
// body.
func acceptingCollector(t *testing.T, body string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}
