package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// TestHelperServe is not a test: it is the child process of
// TestServe_Kill9 (and of the other tests that start serve as a process),
// running mcpaudit serve until it is killed, or stopped by SIGTERM or
// SIGINT as main stops it.
func TestHelperServe(t *testing.T) {
	dir := os.Getenv("MCPAUDIT_CHILD_DATA_DIR")
	if dir == "" {
		t.Skip("only runs as the child of TestServe_Kill9")
	}
	args := []string{"serve", "--data-dir", dir, "--ingest-listen", "127.0.0.1:0",
		"--grpc-listen", "", "--api-listen", "127.0.0.1:0", "--log-level", "info"}
	if extra := os.Getenv("MCPAUDIT_CHILD_ARGS"); extra != "" {
		var more []string
		if err := json.Unmarshal([]byte(extra), &more); err != nil {
			t.Fatal(err)
		}
		args = append(args, more...)
	}
	if os.Getenv("MCPAUDIT_CHILD_HUP_WHILE_OPENING") != "" {
		// TestServe_SIGHUPWhileOpening: a SIGHUP at the first progress
		// report of the store's open, from the goroutine that opens it.
		var once sync.Once
		testHookOpenProgress = func(string, sqlite.Progress) {
			once.Do(func() { syscall.Kill(os.Getpid(), syscall.SIGHUP) })
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run(ctx, args, nil, os.Stdout, os.Stderr)
}

// TestServe_Kill9 kills the server with SIGKILL while clients are posting,
// then checks the store: every call whose request was acknowledged is
// there, and no call is there twice.
func TestServe_Kill9(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServe$")
	cmd.Env = append(os.Environ(), "MCPAUDIT_CHILD_DATA_DIR="+dir)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// The child logs where it listens.
	addr := ""
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "mcpaudit serving" {
			addr = m["ingest"].(string)
			break
		}
	}
	if addr == "" {
		t.Fatal("the child server did not start")
	}
	go io.Copy(io.Discard, stderr)

	c := capgen.Generate(capgen.Config{Seed: 11, Sessions: 4000, NoiseRate: 0.0001})
	var lines [][]byte
	for _, l := range c.Lines {
		if bytes.HasPrefix(l, []byte(`{"`)) && bytes.Contains(l, []byte(`"request"`)) {
			lines = append(lines, l)
		}
	}
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	const clients = 4
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w * 25; i < len(lines); i += clients * 25 {
				select {
				case <-stop:
					return
				default:
				}
				batch := bytes.Join(lines[i:min(i+25, len(lines))], []byte("\n"))
				resp, err := http.Post("http://"+addr+"/v1/calls", "application/x-ndjson", bytes.NewReader(batch))
				if err != nil {
					return // the server died mid-request: not acknowledged
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					continue
				}
				ids := callIDs(t, batch)
				mu.Lock()
				for _, id := range ids {
					acked[id] = true
				}
				mu.Unlock()
			}
		}(w)
	}
	// Kill once a good part has been acknowledged, while requests are in flight.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n > len(lines)/3 {
			break
		}
	}
	cmd.Process.Signal(os.Kill)
	cmd.Wait()
	close(stop)
	wg.Wait()
	if len(acked) == 0 {
		t.Fatal("nothing was acknowledged before the kill")
	}

	// Read where the data dir keeps the calls, as the --data-dir readers
	// do: the call logs of a new data dir since dflt51 (the table alone,
	// read before, held none of them).
	st, err := openReading(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		st.Close()
		// The crashed data opens again and the server recovers from it.
		s := startTest(t, testConfig(t, dir))
		resp, err := http.Get("http://" + s.apiAddr + "/readyz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("server not ready after recovery: %v %v", err, resp)
		}
		resp.Body.Close()
	}()
	seen := map[string]int{}
	if err := st.ScanCalls(context.Background(), time.Time{}, func(r *audit.Record) error {
		c := r.Call
		seen[c.ID]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	lost, twice := 0, 0
	for id := range acked {
		if seen[id] == 0 {
			lost++
		}
	}
	for _, n := range seen {
		if n > 1 {
			twice++
		}
	}
	t.Logf("%d calls acknowledged before SIGKILL, %d stored", len(acked), len(seen))
	if lost > 0 || twice > 0 {
		t.Fatalf("%d acknowledged calls lost, %d stored twice", lost, twice)
	}
}

func callIDs(t *testing.T, batch []byte) []string {
	dec, err := capture.NewDecoder(bytes.NewReader(batch), "batch")
	if err != nil {
		t.Error(err)
		return nil
	}
	var ids []string
	for {
		c, err := dec.Next()
		if err == io.EOF {
			return ids
		}
		if err != nil {
			if !strings.Contains(err.Error(), "batch:") {
				t.Error(err)
			}
			continue
		}
		ids = append(ids, c.ID)
	}
}
