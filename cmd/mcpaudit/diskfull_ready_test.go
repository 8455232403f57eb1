package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
	"github.com/mcpaudit/mcpaudit/internal/tmpfs"
)

// TestServe_DiskFullNotReady: on a real full disk (a 24 MiB tmpfs
// filled by another file), once a request is refused for want of space
// /readyz answers 503 with the reason, /api/v1/status says it
// (store.disk_full) and mcpaudit_store_ready is 0, so that an
// orchestrator or load balancer routes away; once space is freed, all
// three say ready again without any write, and calls are taken again.
// Before (found by op46's reviewer), the 503 to the sender was the only
// place a full disk showed with ack commit: /readyz answered 200
// throughout. Both acks: with "log" the call log's write is the one that
// fails, and its drain may fail too and say so first. Skipped, loudly, where a tmpfs cannot be mounted (not root).
func TestServe_DiskFullNotReady(t *testing.T) {
	for _, ack := range []string{sqlite.AckCommit, sqlite.AckLog} {
		t.Run(ack, func(t *testing.T) { diskFullNotReady(t, ack) })
	}
}

func diskFullNotReady(t *testing.T, ack string) {
	dir := tmpfs.Mount(t, "24m")
	cfg := testConfig(t, filepath.Join(dir, "data"))
	cfg.Serve.SQLite.Ack = ack
	s := startTest(t, cfg)
	readyz := func() (int, string) {
		t.Helper()
		r, err := http.Get("http://" + s.apiAddr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		return r.StatusCode, string(b)
	}
	status := func() *api.StoreStatus {
		t.Helper()
		var st api.StatusResponse
		getJSON(t, "http://"+s.apiAddr+"/api/v1/status", &st)
		if st.Store == nil {
			t.Fatal("/api/v1/status has no store")
		}
		return st.Store
	}
	ready := func(want bool) {
		t.Helper()
		code, body := readyz()
		st := status()
		gauge := strings.Contains(scrapeMetrics(t, s), "\nmcpaudit_store_ready 1\n")
		if want && (code != 200 || !st.Ready || st.DiskFull || !gauge) {
			t.Fatalf("want ready: /readyz %d %s, status %+v, mcpaudit_store_ready 1: %v", code, body, st, gauge)
		}
		if !want && (code != 503 || st.Ready || !st.DiskFull || gauge) {
			t.Fatalf("want not ready for a full disk: /readyz %d %s, status %+v, mcpaudit_store_ready 1: %v", code, body, st, gauge)
		}
		// With ack log the drain that fails on the full disk may say it
		// first, in its own words (the call log's reason, which names
		// the path as it did before).
		const reason = "store: disk full (ENOSPC) writing mcpaudit.db"
		if !want && ack == sqlite.AckCommit && (!strings.Contains(body, reason) || !strings.Contains(st.Reason, reason) || strings.Contains(body, dir) || strings.Contains(st.Reason, dir)) {
			t.Errorf("want the reason, %s, and no path (%s): /readyz %s, status %s", reason, dir, body, st.Reason)
		}
	}
	// waitReady waits for the store to be ready: with ack log the drain
	// tries the call log again on its own schedule.
	waitReady := func() {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if code, _ := readyz(); code == 200 || time.Now().After(deadline) {
				break
			}
		}
		ready(true)
	}
	post := func(req, n int) (int, string) {
		var body strings.Builder
		note := strings.Repeat("x", 2000)
		at := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339Nano)
		for i := range n {
			// Each note differs, so that the calls do not compress to
			// nothing.
			fmt.Fprintf(&body, `{"time":%q,"server":"thegram","session":"s%d","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_projects","arguments":{"note":"%d%s"}}},"response":{"jsonrpc":"2.0","id":%d,"result":{"content":[]}}}`+"\n",
				at, req, i, req*1000+i, note, i)
		}
		resp := postCalls(t, s, []byte(body.String()), false)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, body := post(0, 10); code != 200 {
		t.Fatalf("before the disk is full: %d %s", code, body)
	}
	ready(true)

	junk := filepath.Join(dir, "junk")
	f, err := os.Create(junk)
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 64<<10)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	req := 1
	for ; req < 50; req++ {
		code, body := post(req, 200)
		if code == 503 && strings.Contains(body, "disk full") {
			break
		}
		if code != 200 {
			t.Fatalf("request %d: %d %s", req, code, body)
		}
	}
	if req == 50 {
		t.Fatal("49 requests of 200 calls of 2 KB each taken on a full disk")
	}
	ready(false)
	// A request of one call may still fit where 200 did not: taken, it
	// was committed, and the disk stays not ready.
	req++
	if code, _ := post(req, 1); code == 200 {
		t.Logf("one call taken on the full disk")
	}
	ready(false)

	if err := os.Remove(junk); err != nil {
		t.Fatal(err)
	}
	waitReady()
	if code, body := post(req+1, 200); code != 200 {
		t.Fatalf("after space was freed: %d %s", code, body)
	}
	waitReady()
}

// TestStatus_StoreDiskFull: `mcpaudit status` says that calls are
// refused while the store's disk is full, not that they are still
// acknowledged as while a spool or call log has room.
func TestStatus_StoreDiskFull(t *testing.T) {
	var b strings.Builder
	const reason = "store: disk full (ENOSPC) writing mcpaudit.db at 2026-12-07T08:00:00Z: ..."
	printStatus(&b, api.StatusResponse{Time: time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC), Store: &api.StoreStatus{Reason: reason, DiskFull: true}}, false)
	out := b.String()
	if !strings.Contains(out, "Store not ready: "+reason+". Calls are refused (503) while the disk has no room for them") || strings.Contains(out, "still acknowledged") {
		t.Errorf("disk full, output:\n%s", out)
	}
}

// TestRedactSecret_FullDisk: creating the redaction key in a data dir on a
// full disk (a real tmpfs) fails and leaves no file behind; once there is
// room it is created, private. Before datadir.WriteFileSynced a
// redact.key.tmp stayed.
func TestRedactSecret_FullDisk(t *testing.T) {
	dir := tmpfs.Mount(t, "64k")
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = f.Write(make([]byte, 4096))
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v", err)
	}
	if _, err := redactSecret("", dir); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("redactSecret on a full disk = %v, want ENOSPC", err)
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 1 {
		t.Errorf("the data dir holds %q, want the filler alone", names)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	key, err := redactSecret("", dir)
	if err != nil || len(key) != 32 {
		t.Fatalf("redactSecret = %d bytes, %v; want 32", len(key), err)
	}
	info, err := os.Stat(filepath.Join(dir, "redact.key"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != datadir.FileMode {
		t.Errorf("redact.key has mode %v, want %v", info.Mode().Perm(), datadir.FileMode)
	}
}
