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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// overloadConfig makes the collector's capacity small and its refusals
// quick: a short queue for the engine, little open state and bytes in
// flight.
const overloadConfig = `detect:
  idle_timeout: 1s
serve:
  memory_limit: 402653184
  pipeline:
    queue_calls: 4000
    max_open_calls: 20000
    commit_every: 50ms
  receiver:
    max_in_flight_bytes: 83886080
`

// TestServe_Overload measures what serve acknowledges with posters that
// wait for each answer, then offers twice that rate at once (new requests
// on a clock, whatever the answers): every answer is 200, or 429 or 503
// with Retry-After; no connection is reset or dropped; every call
// acknowledged is stored. MCPAUDIT_OVERLOAD_LOG=1 prints the figures.
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

	// Capacity: four posters that wait for each answer, for 3 s.
	var wg sync.WaitGroup
	start := time.Now()
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < 3*time.Second {
				post(take(), fmt.Sprintf("measure-%d", p))
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	capacity := float64(len(acked)*200) / time.Since(start).Seconds()
	measured := fmt.Sprint(statuses)
	statuses = map[string]int{}
	mu.Unlock()
	if capacity < 1000 {
		t.Fatalf("capacity %.0f calls/s measured (%s): too little to overload", capacity, measured)
	}

	// Twice that, offered on a clock for 4 s.
	rate := 2 * capacity / 200 // batches per second
	start = time.Now()
	sent := 0
	for time.Since(start) < 4*time.Second {
		due := int(time.Since(start).Seconds() * rate)
		for ; sent < due; sent++ {
			wg.Add(1)
			source := fmt.Sprintf("load-%d", sent%16)
			go func() {
				defer wg.Done()
				post(take(), source)
			}()
		}
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	took := time.Since(start)
	peak := peakRSS(t, c.cmd.Process.Pid)

	var keys []string
	for k := range statuses {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	report := fmt.Sprintf("capacity %.0f calls/s (%s); offered %.0f calls/s for %s: %v; peak RSS %d MiB",
		capacity, measured, float64(sent*200)/took.Seconds(), took.Round(time.Millisecond), statuses, peak>>20)
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
	// The limit is a target, not a cap (docs/config.md): SQLite's memory
	// is outside the Go runtime's. From the id index (schema 4) on, the
	// peak here spread over 244-422 MiB against 210-355 before, cause not
	// found (docs/benchmarks.md, "Memory limit"); a quarter over fails.
	if peak > 384<<20*5/4 {
		t.Errorf("peak RSS %d MiB, more than a quarter over the memory limit of 384 MiB\n%s", peak>>20, report)
	}

	// Every acknowledged call is stored.
	c.kill()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
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
