package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// overloadConfig makes the collector's capacity small and its refusals
// quick: a queue for the engine of one request's calls (the test's batches
// are 200), little open state and bytes in flight. Two requests whose calls
// wait for the engine at once are more than the queue holds, on any
// machine: the overload comes from the posters' number, not from
// outrunning the machine (flk23: with a queue of 4000 the test offered
// twice a capacity it measured first, and gave up when a loaded machine
// measured 743 calls/s).
const overloadConfig = `detect:
  idle_timeout: 1s
serve:
  memory_limit: 402653184
  pipeline:
    queue_calls: 200
    max_open_calls: 20000
    commit_every: 50ms
  receiver:
    max_in_flight_bytes: 83886080
`

// TestServe_Overload has 32 posters send batches of 200 calls for 4 s,
// each waiting for its answer, to a serve whose engine queue holds one
// batch: every answer is 200, or 429 or 503 with Retry-After; some are
// refusals (the overload was reached); no connection is reset or dropped;
// every call acknowledged is stored. MCPAUDIT_OVERLOAD_LOG=1 prints the
// figures.
func TestServe_Overload(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a server process for about 10 s")
	}
	dir := t.TempDir()
	config := filepath.Join(t.TempDir(), "mcpaudit.yaml")
	os.WriteFile(config, []byte(overloadConfig), 0o644)
	ingest, api := freePort(t), freePort(t)
	c := startChild(t, dir, config, ingest, api)
	defer c.kill()
	mem := watchRSS(c.cmd.Process.Pid)

	// Batches of 200 distinct calls, made before the clock starts.
	cap := capgen.Generate(capgen.Config{Seed: 9, Sessions: 10_000, Span: 2 * time.Hour, Start: time.Now().UTC().Add(-3 * time.Hour), NoiseRate: -1})
	var batches [][]byte
	for i := 0; i+200 <= len(cap.Lines); i += 200 {
		batches = append(batches, append(bytes.Join(cap.Lines[i:i+200], []byte("\n")), '\n'))
	}
	var next atomic.Int64
	// Past the last batch they come again in other sessions: other calls.
	take := func() []byte {
		i := int(next.Add(1) - 1)
		b := batches[i%len(batches)]
		if round := i / len(batches); round > 0 {
			b = bytes.ReplaceAll(b, []byte(`"session":"`), []byte(fmt.Sprintf(`"session":"r%d-`, round)))
		}
		return b
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	var mu sync.Mutex
	statuses := map[string]int{}
	var acked [][]byte
	var noRetryAfter int
	post := func(body []byte, source string) {
		req, _ := http.NewRequest("POST", "http://"+ingest+"/v1/calls", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set(receiver.SourceHeader, source)
		resp, err := client.Do(req)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			statuses["error: "+err.Error()]++
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses[fmt.Sprint(resp.StatusCode)]++
		switch resp.StatusCode {
		case 200:
			acked = append(acked, body)
		case 429, 503:
			if resp.Header.Get("Retry-After") == "" {
				noRetryAfter++
			}
		}
	}

	// 32 posters that wait for each answer, for 4 s: the test bounds the
	// time it loads the server, not what the server must do meanwhile.
	var wg sync.WaitGroup
	start := time.Now()
	for p := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < 4*time.Second {
				post(take(), fmt.Sprintf("load-%d", p%16))
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	peak := peakRSS(t, c.cmd.Process.Pid)
	anon, file := mem.stop()

	var keys []string
	for k := range statuses {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	report := fmt.Sprintf("%d batches of 200 calls posted in %s: %v; peak RSS %d MiB (sampled: anonymous at most %d MiB, file-backed %d MiB)",
		next.Load(), took.Round(time.Millisecond), statuses, peak>>20, anon>>20, file>>20)
	if os.Getenv("MCPAUDIT_OVERLOAD_LOG") != "" {
		t.Log(report)
	}
	for _, k := range keys {
		if k != "200" && k != "429" && k != "503" {
			t.Errorf("%d answers %q under overload, want only 200, 429 and 503\n%s", statuses[k], k, report)
		}
	}
	if noRetryAfter > 0 {
		t.Errorf("%d refusals without Retry-After", noRetryAfter)
	}
	if statuses["200"] == 0 {
		t.Errorf("nothing acknowledged under overload\n%s", report)
	}
	if statuses["429"]+statuses["503"] == 0 {
		t.Errorf("no request refused: the queue of one batch was never full, the overload not reached\n%s", report)
	}
	// The limit is a target, not a cap (docs/config.md): SQLite's memory
	// is outside the Go runtime's, and VmHWM counts the executable's
	// mapped pages too. From the id index (schema 4) on, the peak here
	// spread over 244-422 MiB against 210-355 before: about 20 MiB more
	// outside the Go heap (a test binary 8.7 MB larger, mapped whole when
	// freshly linked: 17-19 MiB more file-backed; pebble's memtables in C
	// memory), and a Go heap that follows the calls accepted, which the
	// spread of this test's capacity moves by 100 MiB (docs/benchmarks.md,
	// "Memory limit"). A quarter over fails.
	if peak > 384<<20*5/4 {
		t.Errorf("peak RSS %d MiB, more than a quarter over the memory limit of 384 MiB\n%s", peak>>20, report)
	}

	// Every acknowledged call is stored.
	c.kill()
	st, err := openReading(dir) // the calls table or the call logs, as serve kept them
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	stored := map[string]bool{}
	st.ScanCalls(context.Background(), time.Time{}, func(r *audit.Record) error { stored[r.Call.ID] = true; return nil })
	missing := 0
	for _, b := range acked {
		for _, id := range callIDs(t, b) {
			if !stored[id] {
				missing++
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d acknowledged calls are not in the store", missing)
	}
}

// rssWatch samples a process's resident memory, split as /proc status
// splits it: VmHWM holds only the peak of the sum.
type rssWatch struct {
	done       chan struct{}
	stopped    chan struct{}
	anon, file int64 // the most anonymous, the most file-backed, in bytes
}

// watchRSS samples pid's RssAnon and RssFile every 20 ms until stop.
func watchRSS(pid int) *rssWatch {
	w := &rssWatch{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(w.stopped)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				return
			}
			for _, l := range strings.Split(string(b), "\n") {
				k, v, _ := strings.Cut(l, ":")
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				switch k {
				case "RssAnon":
					w.anon = max(w.anon, kb<<10)
				case "RssFile":
					w.file = max(w.file, kb<<10)
				}
			}
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// stop ends the sampling and returns the most anonymous and the most
// file-backed memory seen, in bytes.
func (w *rssWatch) stop() (anon, file int64) {
	close(w.done)
	<-w.stopped
	return w.anon, w.file
}
