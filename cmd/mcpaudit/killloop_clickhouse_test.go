package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// privateClickHouse starts a ClickHouse server of the test's own through
// scripts/clickhouse.sh (its own directory and free ports), for a test that
// stops it: the shared server of the run stays up for the other tests. It
// returns the DSN and a function that runs the script (stop, start) on it;
// the server is stopped when the test ends. Without the script the test
// skips (fails in CI).
func privateClickHouse(t *testing.T) (dsn string, ctl func(cmd string)) {
	t.Helper()
	clickhouseDSN(t)
	script := os.Getenv("MCPAUDIT_CLICKHOUSE_CTL")
	if script == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set but MCPAUDIT_CLICKHOUSE_CTL is not: scripts/test.sh must export it")
		}
		t.Skip("SKIPPED: MCPAUDIT_CLICKHOUSE_CTL is not set, so the test cannot start a server to stop; eval \"$(scripts/clickhouse.sh start)\" sets it")
	}
	// The script picks free ports (20000 up); in a run given a range of
	// ports (MCPAUDIT_TEST_PORTS) they come from freePort.
	port := func() string {
		if os.Getenv("MCPAUDIT_TEST_PORTS") == "" {
			return "auto"
		}
		_, p, _ := net.SplitHostPort(freePort(t))
		return p
	}
	env := append(os.Environ(), "MCPAUDIT_CLICKHOUSE_DIR="+t.TempDir(),
		"MCPAUDIT_CLICKHOUSE_TCP_PORT="+port(), "MCPAUDIT_CLICKHOUSE_HTTP_PORT="+port())
	run := func(cmd string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c := exec.CommandContext(ctx, script, cmd)
		c.Env = env
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Errorf("%s %s: %v\n%s", script, cmd, err, stderr.String())
		}
		return string(out)
	}
	for _, line := range strings.Split(run("start"), "\n") {
		kv, ok := strings.CutPrefix(line, "export ")
		if !ok {
			continue
		}
		env = append(env, kv)
		if v, ok := strings.CutPrefix(kv, "MCPAUDIT_CLICKHOUSE_DSN="); ok {
			dsn = v
		}
	}
	if dsn == "" {
		t.Fatal("scripts/clickhouse.sh start printed no DSN")
	}
	t.Cleanup(func() { run("stop") })
	return dsn, func(cmd string) { run(cmd) }
}

// TestServe_KillLoopClickHouse is the kill loop with the ClickHouse store
// (ack: log, the default): while four posters send, ClickHouse is stopped
// for a while and serve is killed with SIGKILL, during the outage too, and
// restarted. Afterwards every acknowledged call is in ClickHouse once (as
// its queries read it, FINAL), the findings equal analyze's, and mcpaudit
// verify --store clickhouse passes with the public key. The outage lasts
// MCPAUDIT_CH_OUTAGE (default 5s; the figure is 60s) and the kills
// are MCPAUDIT_KILLS (default 5).
func TestServe_KillLoopClickHouse(t *testing.T) {
	t.Parallel() // a serve child and a ClickHouse server of its own
	dsn, ctl := privateClickHouse(t)
	outage := 5 * time.Second
	if d, err := time.ParseDuration(os.Getenv("MCPAUDIT_CH_OUTAGE")); err == nil && d > 0 {
		outage = d
	}
	kills := 5
	if n, err := strconv.Atoi(os.Getenv("MCPAUDIT_KILLS")); err == nil && n > 0 {
		kills = n
	}
	keys := t.TempDir()
	priv, pub := filepath.Join(keys, "signing.pem"), filepath.Join(keys, "verify.pem")
	if err := keygenCommand([]string{"--private-key", priv, "--public-key", pub}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	db := fmt.Sprintf("mcpaudit_kill_%d", time.Now().UnixNano())
	dir := t.TempDir()
	cfg := liveConfig(t)
	config := filepath.Join(t.TempDir(), "mcpaudit.yaml")
	yaml := fmt.Sprintf(`detect:
  verify_window: %s
  idle_timeout: 1s
  allowed_lateness: 10m
serve:
  store: clickhouse
  signing_key_file: %s
  pipeline:
    commit_every: 50ms
  clickhouse:
    dsn: %s
    database: %s
    batch_age: 100ms
    retry_for: 1s
    insert_timeout: 3s
    checkpoint_every: 1s
`, cfg.Detect.VerifyWindow, priv, dsn, db)
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	// The outage starts a second into posting; posting goes on for a few
	// seconds after it, and the kills are spread over the whole.
	span := outage + 4*time.Second
	// Posting lasts about 3.3 s per 800 sessions (runKillLoop).
	sessions := max(800, int(800*span/(3300*time.Millisecond)))
	killNow := make(chan struct{}, 1)
	stopped := make(chan time.Duration, 1)
	var down atomic.Bool
	var killedDown atomic.Int64
	res := runKillLoop(t, killLoop{dir: dir, config: config, cfg: cfg, kills: kills, sessions: sessions, span: span, killNow: killNow,
		during: func() {
			time.Sleep(time.Second)
			start := time.Now()
			down.Store(true)
			ctl("stop")
			// One kill while ClickHouse is down: serve holds acknowledged
			// calls in its spool only. Its restart waits for ClickHouse.
			time.Sleep(min(2*time.Second, outage/2))
			killNow <- struct{}{}
			time.Sleep(outage - min(2*time.Second, outage/2))
			ctl("start")
			down.Store(false)
			stopped <- time.Since(start)
		},
		killed: func() {
			if down.Load() {
				killedDown.Add(1)
			}
		},
		stored: func(t *testing.T) map[string]int {
			conn := chConn(t, dsn)
			seen := map[string]int{}
			rows, err := conn.Query(context.Background(), "SELECT id, count() FROM "+db+".calls FINAL GROUP BY id")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				var n uint64
				if err := rows.Scan(&id, &n); err != nil {
					t.Fatal(err)
				}
				seen[id] = int(n)
			}
			var raw uint64
			conn.QueryRow(context.Background(), "SELECT count() FROM "+db+".calls").Scan(&raw)
			t.Logf("calls: %d distinct, %d rows before ClickHouse collapses copies", len(seen), raw)
			return seen
		},
		verify: []string{"--store", "clickhouse", "--clickhouse-dsn", dsn, "--clickhouse-database", db, "--public-key", pub}})
	t.Logf("ClickHouse stopped for %s (from the stop command to the start's return); %d of the kills in that time (a serve restarted then waits for ClickHouse before it listens)",
		(<-stopped).Round(100*time.Millisecond), killedDown.Load())
	res.check(t)
}
