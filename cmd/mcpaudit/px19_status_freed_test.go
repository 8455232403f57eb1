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

// TestStatus_TooLateKeptAfterPartitionFreed (px19; live18's defect C): a
// call counted too late stays counted in /api/v1/status and `mcpaudit
// status` once its partition is freed as idle, as
// mcpaudit_pipeline_late_calls_total{result="too_late"} keeps it. Before,
// the status summed the partitions held now, and said "0 too late" beside a
// metric of 1, with no "Not judged" line for the call any more. Through a
// real serve; the freeing comes after a minute of quiet (the pipeline frees
// after max(idle_timeout, 1m)), so the test takes about 70 s.
func TestStatus_TooLateKeptAfterPartitionFreed(t *testing.T) {
	t.Parallel() // waits a minute of wall clock on a serve of its own
	if testing.Short() {
		t.Skip("waits a minute for the partition to be freed")
	}
	config := filepath.Join(t.TempDir(), "mcpaudit.yaml")
	os.WriteFile(config, []byte("detect:\n  idle_timeout: 1s\n  lateness: 1s\n  allowed_lateness: 2s\n  max_clock_skew: 1s\n  verify_window: 2s\n  correlation_window: 2s\n  join_wait: 1s\n"+
		"serve:\n  pipeline:\n    commit_every: 50ms\n"), 0o644)
	apiAddr, ingest := freePort(t), freePort(t)
	ctx, stop := context.WithCancel(context.Background())
	var serveLog lockedBuffer
	served := make(chan error, 1)
	go func() {
		served <- serveCommand(ctx, []string{"--config", config, "--data-dir", t.TempDir(), "--api-listen", apiAddr,
			"--ingest-listen", ingest, "--grpc-listen", ""}, &serveLog)
	}()
	defer func() { stop(); <-served }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + apiAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-served:
			served <- err // for the deferred wait
			t.Fatalf("serve stopped: %v\n%s", err, serveLog.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready:\n%s", serveLog.String())
		}
	}
	post := func(at time.Time, id int) {
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
	status := func() api.StatusResponse {
		var st api.StatusResponse
		getJSON(t, "http://"+apiAddr+"/api/v1/status", &st)
		return st
	}
	metric := func() string {
		resp, err := http.Get("http://" + apiAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, `mcpaudit_pipeline_late_calls_total{`) && strings.Contains(l, `result="too_late"`) {
				return l[strings.LastIndexByte(l, ' ')+1:]
			}
		}
		return ""
	}

	now := time.Now()
	post(now, 1)
	// Judged: the watermark passes it once the source is idle.
	for deadline := time.Now().Add(20 * time.Second); !status().Judged || len(status().Partitions) == 0 || status().Partitions[0].Watermark == nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first call never judged: %+v\n%s", status(), serveLog.String())
		}
	}
	post(now.Add(-5*time.Minute), 2) // far behind the watermark: too late
	for deadline := time.Now().Add(20 * time.Second); status().TooLate != 1; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the call dated 5 min back was not counted too late: %+v\n%s", status(), serveLog.String())
		}
	}
	if m := metric(); m != "1" {
		t.Fatalf("mcpaudit_pipeline_late_calls_total{result=\"too_late\"} is %q before the freeing; want 1", m)
	}
	// The partition is freed after a minute of quiet.
	for deadline := time.Now().Add(2 * time.Minute); len(status().Partitions) != 0; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the partition was never freed: %+v\n%s", status(), serveLog.String())
		}
	}
	st, m := status(), metric()
	if m != "1" {
		t.Errorf("mcpaudit_pipeline_late_calls_total{result=\"too_late\"} is %q after the freeing; want 1 (the metric carries a freed partition's counts)", m)
	}
	if st.TooLate != 1 {
		t.Errorf("after its partition was freed the status says %d too late; the metric says %s (live18's defect C)", st.TooLate, m)
	}
	var out bytes.Buffer
	printStatus(&out, st, false)
	for _, want := range []string{"1 too late (stored, never judged, 1 of them in partitions since freed as idle)", "Not judged: 1 calls of calls:relay-a (thegram)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("mcpaudit status after the freeing lacks %q:\n%s", want, out.String())
		}
	}
}
