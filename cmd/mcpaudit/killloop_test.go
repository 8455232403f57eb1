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
	"strings"
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
	var lines []string
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "mcpaudit serving" {
			go io.Copy(io.Discard, stderr)
			return &child{cmd}
		}
		lines = append(lines, sc.Text())
	}
	cmd.Process.Kill()
	cmd.Wait()
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	t.Fatalf("the child server did not start; its last lines:\n%s", strings.Join(lines, "\n"))
	return nil
}

// vmHWM reads the peak resident set of a process from /proc, in bytes; 0
// when it cannot.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// kill kills the child with SIGKILL and returns its peak resident set
// (VmHWM, bytes; 0 when it cannot be read).
func (c *child) kill() int64 {
	peak := vmHWM(c.cmd.Process.Pid)
	c.cmd.Process.Signal(os.Kill)
	c.cmd.Wait()
	return peak
}

// TestServe_KillLoop posts a mixed capture of both servers in batches of 40
// from four posters (each a source), re-sending every batch that was not
// acknowledged, while the server is killed with SIGKILL at random moments
// and restarted on the same data. Afterwards every acknowledged call is
// stored once, and the findings equal analyze's on the same calls: nothing
// missed, nothing twice; and mcpaudit verify finds the history intact.
// MCPAUDIT_KILLS sets the number of kills (20, as issue 12 asks);
// MCPAUDIT_KILL_SPAN spreads them over that long, with as many more
// sessions (default: 100 sessions a kill, about as many seconds as kills).
func TestServe_KillLoop(t *testing.T) {
	kills := 20
	if n, err := strconv.Atoi(os.Getenv("MCPAUDIT_KILLS")); err == nil && n > 0 {
		kills = n
	}
	var span time.Duration
	sessions := max(800, 100*kills)
	if d, err := time.ParseDuration(os.Getenv("MCPAUDIT_KILL_SPAN")); err == nil && d > 0 {
		span, sessions = d, max(800, int(800*d/(3300*time.Millisecond)))
	}
	dir := t.TempDir()
	cfg := liveConfig(t)
	config := filepath.Join(t.TempDir(), "mcpaudit.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("detect:\n  verify_window: %s\n  idle_timeout: 1s\n  allowed_lateness: 10m\nserve:\n  pipeline:\n    commit_every: 50ms\n",
		cfg.Detect.VerifyWindow)), 0o644); err != nil {
		t.Fatal(err)
	}
	res := runKillLoop(t, killLoop{dir: dir, config: config, cfg: cfg, kills: kills, sessions: sessions, span: span,
		stored: func(t *testing.T) map[string]int {
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
			return seen
		},
		verify: []string{"--data-dir", dir}})
	res.check(t)
}

// killLoop is one run of the kill loop: serve on dir with config, killed
// kills times while four posters send sessions of a generated capture.
type killLoop struct {
	dir, config string
	cfg         Config
	kills       int
	sessions    int
	// span, when set, spreads the kills over that long; the caller gives
	// enough sessions for posting to last as long. Otherwise the kills come
	// in the first seconds.
	span time.Duration
	// killNow, when set, asks for a kill at once (one during an outage).
	killNow chan struct{}
	// during runs beside the posters (an outage of the store), from the
	// start of posting.
	during func()
	// killed, when set, is called after each kill.
	killed func()
	// findingsWait bounds the wait for the findings to become analyze's.
	findingsWait time.Duration
	// stored returns every stored call id with its number of copies; it
	// runs after the last serve is killed.
	stored func(t *testing.T) map[string]int
	// verify are the arguments of mcpaudit verify after the run.
	verify []string
}

// killLoopResult is what a kill loop measured.
type killLoopResult struct {
	kills, wantKills    int
	acked, stored       int
	lost, twice, resent int
	findings            int
	dup                 []string
	peakRSS             int64 // the largest VmHWM of the serve processes, bytes
}

func (r killLoopResult) check(t *testing.T) {
	t.Helper()
	t.Logf("%d kills, %d calls acknowledged (%d batches re-sent), %d stored, %d lost, %d stored twice; %d findings; peak RSS of serve %.1f MiB",
		r.kills, r.acked, r.resent, r.stored, r.lost, r.twice, r.findings, float64(r.peakRSS)/(1<<20))
	if r.lost > 0 || r.twice > 0 || r.kills < r.wantKills {
		t.Fatalf("%d acknowledged calls lost, %d stored twice %v, %d of %d kills", r.lost, r.twice, r.dup, r.kills, r.wantKills)
	}
}

// runKillLoop runs kl and checks the findings and mcpaudit verify; the
// caller checks the figures returned.
func runKillLoop(t *testing.T, kl killLoop) killLoopResult {
	recs := liveCaptureOf(t, 77, kl.sessions)
	want := analyzeFindings(t, kl.cfg, ndjson(recs))
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
	// A poster pauses well under the idle timeout between its batches: a
	// partition left quiet longer closes its windows on the wall clock,
	// before the read that verifies a write, which analyze does not see.
	// Posting lasts about 3.3 s per 800 sessions.
	pause := func(int) time.Duration { return time.Duration(100+rand.Intn(300)) * time.Millisecond }

	var res killLoopResult
	res.wantKills = kl.kills
	c := startChild(t, kl.dir, kl.config, ingest, api)
	if kl.during != nil {
		go kl.during()
	}
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
				time.Sleep(pause(p))
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	rng := rand.New(rand.NewSource(1))
	next := func() time.Duration {
		if kl.span > 0 {
			avg := kl.span / time.Duration(kl.kills+1)
			return avg/2 + time.Duration(rng.Int63n(int64(avg)+1))
		}
		return time.Duration(30+rng.Intn(300)) * time.Millisecond
	}
	kill := func() {
		res.peakRSS = max(res.peakRSS, c.kill())
		res.kills++
		if kl.killed != nil {
			kl.killed()
		}
		c = startChild(t, kl.dir, kl.config, ingest, api)
	}
	// kl.kills at random moments, and one more each time killNow asks,
	// until posting is done.
	scheduled := 0
loop:
	for {
		var timer <-chan time.Time
		if scheduled < kl.kills {
			timer = time.After(next())
		}
		select {
		case <-done:
			break loop
		case <-kl.killNow:
			kill()
		case <-timer:
			scheduled++
			kill()
		}
	}
	res.wantKills = kl.kills + res.kills - scheduled
	<-done
	defer c.kill()

	// The server judges what is left and closes its windows on the wall
	// clock; its findings must become analyze's.
	s := &server{apiAddr: api}
	var got []audit.Finding
	wait := kl.findingsWait
	if wait == 0 {
		wait = 40 * time.Second
	}
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		got = apiFindings(t, s, "")
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if bytes.Equal(gj, wj) {
			break
		}
	}
	diffFindings(t, "kill loop", want, got)
	res.findings = len(got)

	// Every acknowledged call is stored, once.
	res.peakRSS = max(res.peakRSS, c.kill())
	seen := kl.stored(t)
	for id := range acked {
		if seen[id] == 0 {
			res.lost++
		}
	}
	for id, n := range seen {
		if n > 1 {
			res.twice++
			res.dup = append(res.dup, id)
		}
	}
	sort.Strings(res.dup)
	res.acked, res.stored, res.resent = len(acked), len(seen), int(resent.Load())
	// The tamper-evidence chains written through the kills still match
	// the stored history.
	var out, errs bytes.Buffer
	err := verifyCommand(t.Context(), kl.verify, &out, &errs)
	t.Logf("mcpaudit verify %v:\n%s%s", kl.verify, out.String(), errs.String())
	if err != nil {
		t.Errorf("verify after the kills: %v", err)
	}
	return res
}
