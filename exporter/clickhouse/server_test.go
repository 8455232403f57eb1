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

// serverCtl runs scripts/clickhouse.sh with a command (stop, start, kill);
// the test skips when the script is not known (outside scripts/test.sh) and
// fails in CI.
func serverCtl(t testing.TB, cmd string) {
	t.Helper()
	ctl := os.Getenv("MCPAUDIT_CLICKHOUSE_CTL")
	if ctl == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set but MCPAUDIT_CLICKHOUSE_CTL is not: scripts/test.sh must export it")
		}
		t.Skip("SKIPPING: MCPAUDIT_CLICKHOUSE_CTL is not set, so the test cannot stop and start the server; eval \"$(scripts/clickhouse.sh start)\" sets it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, ctl, cmd).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", ctl, cmd, err, out)
	}
	t.Logf("%s %s: %s", ctl, cmd, strings.TrimSpace(string(out)))
}
