package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// child is mcpaudit serve running as a process of its own.
type child struct {
	cmd *exec.Cmd
}

// startChild starts serve on dir with the config file and fixed addresses,
// and waits until it serves.
func startChild(t *testing.T, dir, config, ingest, api string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServe$")
	args, _ := json.Marshal([]string{"--config", config, "--ingest-listen", ingest, "--api-listen", api})
	cmd.Env = append(os.Environ(), "MCPAUDIT_CHILD_DATA_DIR="+dir, "MCPAUDIT_CHILD_ARGS="+string(args))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "mcpaudit serving" {
			go io.Copy(io.Discard, stderr)
			return &child{cmd}
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	t.Fatal("the child server did not start")
	return nil
}

func (c *child) kill() {
	c.cmd.Process.Signal(os.Kill)
	c.cmd.Wait()
}

// TestServe_KillLoop posts a mixed capture of both servers in batches of 40
// from four posters (each a source), re-sending every batch that was not
// acknowledged, while the server is killed with SIGKILL at random moments
// and restarted on the same data. Afterwards every acknowledged call is
// stored once, and the findings equal analyze's on the same calls: nothing
// missed, nothing twice; and mcpaudit verify finds the history intact.
// MCPAUDIT_KILLS sets the number of kills (8).
func TestServe_KillLoop(t *testing.T) {
	kills := 8
	if n, err := strconv.Atoi(os.Getenv("MCPAUDIT_KILLS")); err == nil && n > 0 {
		kills = n
	}
	dir := t.TempDir()
	cfg := liveConfig(t)
	config := filepath.Join(t.TempDir(), "mcpaudit.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("detect:\n  verify_window: %s\n  idle_timeout: 1s\n  allowed_lateness: 10m\nserve:\n  pipeline:\n    commit_every: 50ms\n",
		cfg.Detect.VerifyWindow)), 0o644); err != nil {
		t.Fatal(err)
	}
	recs := liveCaptureOf(t, 77, 800)
	want := analyzeFindings(t, cfg, ndjson(recs))
	if len(want) < 20 {
		t.Fatalf("the capture gives %d findings", len(want))
	}
	ingest, api := freePort(t), freePort(t)

	// Four posters, each with its share of the sessions, in time order.
	const posters = 4
	var batches [posters][][]map[string]any
	var cur [posters][]map[string]any
	for _, r := range recs {
		h := fnv.New32a()
		h.Write([]byte(fmt.Sprint(r["session"])))
		p := int(h.Sum32() % posters)
		cur[p] = append(cur[p], r)
		if len(cur[p]) == 40 {
			batches[p] = append(batches[p], cur[p])
			cur[p] = nil
		}
	}
	for p := range cur {
		if len(cur[p]) > 0 {
			batches[p] = append(batches[p], cur[p])
		}
	}

	c := startChild(t, dir, config, ingest, api)
	var mu sync.Mutex
	acked := map[string]bool{}
	var resent atomic.Int64
	var wg sync.WaitGroup
	for p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for _, b := range batches[p] {
				body := ndjson(b)
				for try := 0; ; try++ {
					if try > 0 {
						resent.Add(1)
						time.Sleep(20 * time.Millisecond)
					}
					req, _ := http.NewRequest("POST", "http://"+ingest+"/v1/calls", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/x-ndjson")
					req.Header.Set(receiver.SourceHeader, fmt.Sprintf("poster-%d", p))
					resp, err := client.Do(req)
					if err != nil {
						continue // the server is down or died mid-request: not acknowledged
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						continue
					}
					mu.Lock()
					for _, id := range callIDs(t, body) {
						acked[id] = true
					}
					mu.Unlock()
					break
				}
				// Posting lasts a few seconds, for the kills to fall in it.
				time.Sleep(time.Duration(100+rand.Intn(300)) * time.Millisecond)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	rng := rand.New(rand.NewSource(1))
	killed := 0
	for killed < kills {
		select {
		case <-done:
		case <-time.After(time.Duration(30+rng.Intn(300)) * time.Millisecond):
			c.kill()
			killed++
			c = startChild(t, dir, config, ingest, api)
			continue
		}
		break
	}
	<-done
	defer c.kill()

	// The server judges what is left and closes its windows on the wall
	// clock; its findings must become analyze's.
	s := &server{apiAddr: api}
	var got []audit.Finding
	for deadline := time.Now().Add(40 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		got = apiFindings(t, s, "")
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if bytes.Equal(gj, wj) {
			break
		}
	}
	diffFindings(t, "kill loop", want, got)

	// Every acknowledged call is stored, once.
	c.kill()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seen := map[string]int{}
	if err := st.ScanCalls(t.Context(), time.Time{}, func(r *audit.Record) error {
		seen[r.Call.ID]++
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
	var dup []string
	for id, n := range seen {
		if n > 1 {
			twice++
			dup = append(dup, id)
		}
	}
	sort.Strings(dup)
	t.Logf("%d kills, %d calls acknowledged (%d batches re-sent), %d stored, %d lost, %d stored twice; %d findings",
		killed, len(acked), resent.Load(), len(seen), lost, twice, len(got))
	if lost > 0 || twice > 0 || killed < kills {
		t.Fatalf("%d acknowledged calls lost, %d stored twice %v, %d of %d kills", lost, twice, dup, killed, kills)
	}
	// The tamper-evidence chains written through the kills still match
	// the stored history.
	var out, errs bytes.Buffer
	if err := verifyCommand(t.Context(), []string{"--data-dir", dir}, &out, &errs); err != nil {
		t.Fatalf("verify after the kills: %v\n%s%s", err, out.String(), errs.String())
	}
}
