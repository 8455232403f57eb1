package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestStatus_WaitUnderTraffic: two posters send reads to one server
// without a pause, so calls always wait for the watermark. `status
// --wait` still succeeds: it waits until what was acknowledged before it
// began is judged, not for an empty engine. A call sent later than the
// allowed lateness is told as too late, not as judged, and every
// source's counts are printed once.
func TestStatus_WaitUnderTraffic(t *testing.T) {
	s := startTest(t, testConfig(t, t.TempDir()))
	post := func(source string, lines ...string) {
		t.Helper()
		if err := postCallsAs(s.ingestAddr, source, []byte(strings.Join(lines, "\n")+"\n")); err != nil {
			t.Error(err)
		}
	}
	var readOn func(server, session string, rpc int, at time.Time) string
	read := func(session string, rpc int, at time.Time) string {
		return readOn("thegram", session, rpc, at)
	}
	readOn = func(server, session string, rpc int, at time.Time) string {
		return fmt.Sprintf(`{"time":%q,"server":%q,"session":%q,"request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"projects":[]}}}}`,
			at.UTC().Format(time.RFC3339Nano), server, session, rpc, rpc)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, pod := range []string{"pod-0", "pod-1"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rpc := 1; ctx.Err() == nil; rpc++ {
				// pod-0 feeds a second server: its counts are its own over
				// both, told once.
				lines := []string{read(pod, rpc, time.Now())}
				if pod == "pod-0" {
					lines = append(lines, readOn("other", pod, rpc+1_000_000, time.Now()))
				}
				post(pod, lines...)
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	defer wg.Wait()
	defer stop()
	time.Sleep(2 * time.Second) // the partition judges, calls keep waiting
	post("late", read("late", 1, time.Now().Add(-10*time.Minute)))

	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"status", "--api-url", "http://" + s.apiAddr, "--wait", "30s"}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("status --wait under steady traffic: exit %d: %s\n%s", code, errb.String(), out.String())
	}
	text := out.String()
	for _, want := range []string{
		"Everything acknowledged before the wait began is judged, and stored.",
		"1 too late (stored, never judged)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("status output lacks %q:\n%s", want, text)
		}
	}
	// pod-0's counts are printed once, in the totals table, naming both
	// servers; elsewhere it is named with its clock only.
	counted := 0
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		// TENANT SOURCE SERVERS CALLS LATE TOO_LATE AHEAD BEHIND.
		if len(f) == 8 && f[1] == "calls:pod-0" {
			counted++
			if f[2] != "thegram,other" && f[2] != "other,thegram" {
				t.Errorf("pod-0's totals name servers %s, want thegram and other", f[2])
			}
		}
	}
	if counted != 1 {
		t.Errorf("pod-0's counts printed %d times, want once:\n%s", counted, text)
	}
}

// TestStatus_WaitThenFindings: `status --wait` succeeds only once what it
// calls judged is stored, so the findings read right after it are there.
// The periodic commit is an hour away here: the status itself must store
// what the engine judged (before, it said judged while the finding was
// still in memory, and a read right after found none, 4 times in 6 with
// the default commit_every).
func TestStatus_WaitThenFindings(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Serve.Pipeline.CommitEvery = time.Hour
	s := startTest(t, cfg)
	body, err := os.ReadFile("../../testdata/examples/oddlynew-copy-blocked-replay.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	if resp := postCalls(t, s, body, false); resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/calls: %s", resp.Status)
	}
	if code, out, errs := cliRun("status", "--api-url", "http://"+s.apiAddr, "--wait", "30s"); code != 0 {
		t.Fatalf("status --wait: exit %d\n%s%s", code, out, errs)
	}
	got := apiFindings(t, s, "")
	if len(got) != 1 || got[0].Kind != audit.KindWastedRetry {
		t.Fatalf("findings read right after status --wait: %v, want the wasted_retry", got)
	}
}

// TestStatus_Help: status asks a running serve only (the event-time status
// is in its memory): its help offers no --data-dir, which it never read,
// and says --api-url is required.
func TestStatus_Help(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"status", "--help"}, nil, &out, &errb); code != 0 {
		t.Fatalf("status --help: exit %d", code)
	}
	help := out.String() + errb.String()
	if strings.Contains(help, "-data-dir") || strings.Contains(help, "data dir is read") || !strings.Contains(help, "required") {
		t.Errorf("status --help offers the data dir, or does not say --api-url is required:\n%s", help)
	}
	if code := run(context.Background(), []string{"status"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "needs --api-url") {
		t.Errorf("status without --api-url: exit %d, %q", code, errb.String())
	}
}
