package clickhouse

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// The tests below run against a real ClickHouse server: scripts/test.sh
// starts one (scripts/clickhouse.sh) and exports MCPAUDIT_CLICKHOUSE_DSN.
// Outside CI they skip loudly without it; in CI its absence fails them.

const dsnEnv = "MCPAUDIT_CLICKHOUSE_DSN"

// serverDSN returns the DSN of the test server or skips (fails in CI).
func serverDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but %s is not: scripts/test.sh must start ClickHouse (scripts/clickhouse.sh start)", dsnEnv)
		}
		t.Skipf("SKIPPING: no ClickHouse server. Run eval \"$(scripts/clickhouse.sh start)\" to set %s, or make test", dsnEnv)
	}
	return dsn
}

var dbSeq atomic.Int64

// testOptions returns options for a fresh database on the test server,
// dropped when the test ends, and a spool in a temporary directory.
func testOptions(t testing.TB) Options {
	t.Helper()
	o := NewDefaultOptions()
	o.DSN = serverDSN(t)
	o.Database = fmt.Sprintf("mcpaudit_test_%d_%d", os.Getpid(), dbSeq.Add(1))
	o.Spool.Dir = t.TempDir()
	// Most tests here watch the insert path itself (cut connections,
	// killed servers, parts on disk): they acknowledge on insert. The
	// conformance suite and acklog_test.go run the default, Ack "log".
	o.Ack = AckInsert
	o.BatchAge = 20 * time.Millisecond
	o.RetryFor = time.Second
	o.InsertTimeout = 5 * time.Second
	o.Logger = testLogger(t)
	t.Cleanup(func() {
		conn := rawConn(t, o.DSN)
		defer conn.Close()
		if err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+o.Database); err != nil {
			t.Logf("cannot drop test database %s: %v", o.Database, err)
		}
	})
	return o
}

// testLogger logs warnings and errors of the store into the test log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// openStore opens a store and closes it at the end of the test.
func openStore(t testing.TB, o Options) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rawConn is a plain connection for checks that go around the store.
func rawConn(t testing.TB, dsn string) driver.Conn {
	t.Helper()
	opts, err := ch.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	opts.Settings = ch.Settings{"allow_experimental_low_cardinality_type": 1}
	conn, err := ch.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// count runs a count query.
func count(t testing.TB, conn driver.Conn, query string) uint64 {
	t.Helper()
	var n uint64
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := conn.QueryRow(ctx, query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// privateServer starts a ClickHouse server of the test's own (its own
// directory and free ports, through scripts/clickhouse.sh) for the tests
// that stop or kill it: the shared server of the run stays up for the tests
// of other packages running at the same time. It returns the DSN and a
// function that runs the script (stop, start, kill) on that server; the
// server is stopped when the test ends. Without the script the test skips
// (fails in CI).
func privateServer(t testing.TB) (dsn string, ctl func(cmd string)) {
	t.Helper()
	serverDSN(t)
	script := os.Getenv("MCPAUDIT_CLICKHOUSE_CTL")
	if script == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set but MCPAUDIT_CLICKHOUSE_CTL is not: scripts/test.sh must export it")
		}
		t.Skip("SKIPPING: MCPAUDIT_CLICKHOUSE_CTL is not set, so the test cannot start a server to stop; eval \"$(scripts/clickhouse.sh start)\" sets it")
	}
	env := append(os.Environ(), "MCPAUDIT_CLICKHOUSE_DIR="+t.TempDir(),
		"MCPAUDIT_CLICKHOUSE_TCP_PORT=auto", "MCPAUDIT_CLICKHOUSE_HTTP_PORT=auto")
	run := func(cmd string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c := exec.CommandContext(ctx, script, cmd)
		c.Env = env
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", script, cmd, err, stderr.String())
		}
		t.Logf("%s %s: %s", script, cmd, strings.TrimSpace(stderr.String()))
		return string(out)
	}
	// The exports of start fix the ports for the later commands.
	for _, line := range strings.Split(run("start"), "\n") {
		kv, ok := strings.CutPrefix(line, "export ")
		if !ok {
			continue
		}
		env = append(env, kv)
		if v, ok := strings.CutPrefix(kv, dsnEnv+"="); ok {
			dsn = v
		}
	}
	if dsn == "" {
		t.Fatal("scripts/clickhouse.sh start printed no DSN")
	}
	t.Cleanup(func() { run("stop") })
	return dsn, func(cmd string) { run(cmd) }
}
