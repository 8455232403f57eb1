package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestStatus_TooLateStoredBeforeRestart (sg22; live22's S2): after a
// restart, the status still tells the calls the run before it stored too
// late. Found from outside: with 920 calls in the store's too_late table,
// the restarted serve said "0 too late (stored, never judged); every
// acknowledged call judged: yes", and so did the page. The counts stay
// since the start, as the metric's (a counter born at 920 would fire
// McpAuditCallsNotJudged at every restart); the ones before it are
// counted from the store at the start and told beside them. Through a real
// serve, stopped and started again on the same data directory (a real
// SQLite file).
func TestStatus_TooLateStoredBeforeRestart(t *testing.T) {
	config := filepath.Join(t.TempDir(), "mcpaudit.yaml")
	os.WriteFile(config, []byte("detect:\n  idle_timeout: 1s\n  lateness: 1s\n  allowed_lateness: 2s\n  max_clock_skew: 1s\n  verify_window: 2s\n  correlation_window: 2s\n  join_wait: 1s\n"+
		"serve:\n  pipeline:\n    commit_every: 50ms\n"), 0o644)
	dataDir := t.TempDir()
	start := func() (apiAddr, ingest string, stop func()) {
		apiAddr, ingest = freePort(t), freePort(t)
		ctx, cancel := context.WithCancel(context.Background())
		var serveLog lockedBuffer
		served := make(chan error, 1)
		go func() {
			served <- serveCommand(ctx, []string{"--config", config, "--data-dir", dataDir, "--api-listen", apiAddr,
				"--ingest-listen", ingest, "--grpc-listen", ""}, &serveLog)
		}()
		stop = func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("serve: %v\n%s", err, serveLog.String())
			}
		}
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if resp, err := http.Get("http://" + apiAddr + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return apiAddr, ingest, stop
				}
			}
			select {
			case err := <-served:
				t.Fatalf("serve stopped: %v\n%s", err, serveLog.String())
			default:
			}
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("serve not ready:\n%s", serveLog.String())
			}
		}
	}
	status := func(apiAddr string) api.StatusResponse {
		var st api.StatusResponse
		getJSON(t, "http://"+apiAddr+"/api/v1/status", &st)
		return st
	}
	post := func(ingest string, at time.Time, id int) {
		t.Helper()
		line := fmt.Sprintf(`{"time":%q,"server":"thegram","session":"s","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"response":{"jsonrpc":"2.0","id":%d,"result":{}}}`+"\n",
			at.UTC().Format(time.RFC3339Nano), id, id)
		req, _ := http.NewRequest("POST", "http://"+ingest+"/v1/calls", strings.NewReader(line))
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set("Mcpaudit-Source", "relay-a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST /v1/calls: %s %s", resp.Status, b)
		}
	}

	apiAddr, ingest, stop := start()
	now := time.Now()
	post(ingest, now, 1)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if st := status(apiAddr); st.Judged && len(st.Partitions) > 0 && st.Partitions[0].Watermark != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first call never judged: %+v", status(apiAddr))
		}
	}
	post(ingest, now.Add(-5*time.Minute), 2) // far behind the watermark: too late
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if st := status(apiAddr); st.TooLate == 1 && st.Unstored == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the call dated 5 min back was not counted and stored too late: %+v", status(apiAddr))
		}
	}
	if st := status(apiAddr); st.TooLateBeforeStart != 0 {
		t.Errorf("first run: %d too late before its start; want 0 (a new data directory)", st.TooLateBeforeStart)
	}
	stop()

	apiAddr, _, stop = start()
	defer stop()
	st := status(apiAddr)
	if st.TooLate != 0 || st.TooLateBeforeStart != 1 {
		t.Errorf("after the restart the status counts %d too late since the start and %d before it; want 0 and 1 (the store's too_late table holds the call)", st.TooLate, st.TooLateBeforeStart)
	}
	var out bytes.Buffer
	printStatus(&out, st, false)
	if want := "0 too late (stored, never judged) since this start, and 1 stored too late before it"; !strings.Contains(out.String(), want) {
		t.Errorf("mcpaudit status after the restart lacks %q:\n%s", want, out.String())
	}
	resp, err := http.Get("http://" + apiAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := "0 since the start, 1 before it"; !strings.Contains(string(page), want) {
		t.Errorf("the page after the restart lacks %q:\n%s", want, page)
	}
}
