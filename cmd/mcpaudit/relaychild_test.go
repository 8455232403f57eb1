package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"syscall"
	"testing"
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
