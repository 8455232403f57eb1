package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProxy_StopLogsWhatItDid (prox17): a stop (SIGTERM) ends the proxy's
// log with one line that says it stopped cleanly and what the stop did:
// the calls in flight it recorded, the records sent, what is left in the
// buffer directory, the journal removed. Before, the log ended at
// "shutting down", as serve's did before op17.
func TestProxy_StopLogsWhatItDid(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`))
	}))
	defer upstream.Close()
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(`{"accepted":1,"rejected":0}`))
	}))
	defer collector.Close()
	addr := freePort(t)
	bufDir := filepath.Join(t.TempDir(), "buf")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errb lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- proxyCommand(ctx, []string{"--listen", addr, "--upstream", upstream.URL, "--server", "thegram",
			"--collector", collector.URL, "--buffer-dir", bufDir}, &errb)
	}()
	var err error
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(20 * time.Millisecond) {
		var resp *http.Response
		resp, err = http.Post("http://"+addr+"/mcp", "application/json",
			strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"a.gram"}}}`))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			break
		}
	}
	if err != nil {
		t.Fatalf("the proxy never answered: %v\n%s", err, errb.String())
	}
	cancel() // as signal.NotifyContext does on SIGTERM
	if err := <-done; err != nil {
		t.Fatalf("proxy: %v\n%s", err, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	var last struct {
		Level, Msg string
		Canceled   *int   `json:"calls_recorded_at_stop"`
		Sent       *int   `json:"records_sent"`
		Left       *int   `json:"bytes_left_in_buffer"`
		Dir        string `json:"buffer_dir"`
		Journal    string `json:"journal"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Level != "INFO" || last.Msg != "stopped cleanly" || last.Canceled == nil || *last.Canceled != 0 ||
		last.Sent == nil || *last.Sent != 1 || last.Left == nil || *last.Left != 0 || last.Dir != bufDir || last.Journal != "removed" {
		t.Errorf("the proxy's last log line is\n%s\nwant INFO stopped cleanly, calls_recorded_at_stop 0, records_sent 1, bytes_left_in_buffer 0, buffer_dir %s, journal removed\nthe log:\n%s",
			lines[len(lines)-1], bufDir, errb.String())
	}
	if js, _ := filepath.Glob(filepath.Join(bufDir, "*.journal*")); len(js) != 0 {
		t.Errorf("journals left after a clean stop: %v", js)
	}
	if _, err := os.Stat(bufDir); err != nil {
		t.Fatal(err)
	}
}
