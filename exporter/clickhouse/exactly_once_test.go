package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// synthCalls makes n distinct call records from the example calls: each a
// copy of an example with its own time, session and JSON-RPC id, so its own
// stable ID.
func synthCalls(t testing.TB, n int, start time.Time, tag string) []audit.Record {
	t.Helper()
	tpl := exampleCalls(t)
	reader := dialect.NewReader(dialect.Config{})
	recs := make([]audit.Record, n)
	for i := range recs {
		c := *tpl[i%len(tpl)]
		c.Time = start.Add(time.Duration(i) * time.Millisecond)
		c.Session = fmt.Sprintf("%s-%d", tag, i/50)
		c.RPCID = strconv.Itoa(i)
		args := canon.Bytes(c.Arguments)
		c.ID = audit.StableID(c.Server, c.Session, c.RPCID, c.Time, c.Tool, args)
		c.Fingerprint = audit.Fingerprint(c.Server, c.Session, c.RPCID, c.Tool, args)
		recs[i] = *reader.Read(&c)
	}
	return recs
}

// synthResults makes write attempts and findings on the calls.
func synthResults(recs []audit.Record, wm time.Time) audit.Results {
	var r audit.Results
	for i, rec := range recs {
		c := rec.Call
		r.Writes = append(r.Writes, audit.Write{
			CallID: c.ID, Time: c.Time, Server: c.Server, Tenant: c.Tenant, Session: c.Session, Tool: c.Tool,
			Document: fmt.Sprintf("doc-%d", i%97), State: audit.StateDurable, StateTime: c.Time,
		})
		if i%3 == 0 {
			r.Findings = append(r.Findings, audit.Finding{
				Kind: audit.KindUnsafeRetry, Severity: audit.SeverityWarning, Server: c.Server, Tenant: c.Tenant,
				Document: fmt.Sprintf("doc-%d", i%97), Time: c.Time, Calls: []string{c.ID}, Summary: "synthetic",
			})
		}
	}
	r.Watermark = wm
	return r
}

// rowCounts returns the physical rows of a table (no FINAL: a row stored
// twice counts twice) and its distinct identities.
func rowCounts(t testing.TB, o Options, table, identity string) (rows, distinct uint64) {
	t.Helper()
	conn := rawConn(t, o.DSN)
	defer conn.Close()
	q := fmt.Sprintf("SELECT count(), uniqExact(%s) FROM %s.%s", identity, o.Database, table)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := conn.QueryRow(ctx, q).Scan(&rows, &distinct); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return rows, distinct
}

func wantRows(t testing.TB, o Options, table, identity string, want int) {
	t.Helper()
	rows, distinct := rowCounts(t, o, table, identity)
	if rows != uint64(want) || distinct != uint64(want) {
		t.Errorf("%s: %d rows, %d distinct; want %d of each (stored exactly once)", table, rows, distinct, want)
	}
}

// waitReady waits until the spool is drained and ClickHouse answers.
func waitReady(t testing.TB, s *Store, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := s.Ready()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("store not ready after %s: %v", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestExactlyOnce cuts the connection in the two ambiguous places of an
// insert and checks that the retried batch leaves every row stored once.
func TestExactlyOnce(t *testing.T) {
	serverDSN(t)
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	const n = 5000
	for _, tc := range []struct {
		name    string
		dropAck bool
	}{
		// The server gets the whole batch and commits it; its answer is
		// lost. The retry must not store the rows again.
		{"ack_lost", true},
		// The connection breaks halfway through the data: the server
		// stores nothing. The retry must store everything.
		{"data_cut", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t)
			p, dsn := newProxy(t, o.DSN)
			o.DSN = dsn
			o.RetryFor = 10 * time.Second
			s := openStore(t, o)
			recs := synthCalls(t, n, start, tc.name)

			p.arm(&cutPlan{after: 64 << 10, dropAck: tc.dropAck})
			if _, err := s.AppendCalls(context.Background(), recs); err != nil {
				t.Fatalf("AppendCalls: %v", err)
			}
			if !p.fired() {
				t.Fatal("the proxy never cut: the batch was smaller than the cut point")
			}
			if tc.dropAck && p.dropped.Load() == 0 {
				t.Fatal("the server never answered the cut insert: the ack-lost case did not happen")
			}
			if tc.dropAck && !s.caps.DedupToken && s.skippedOnRetry.Load() != n {
				t.Errorf("the retry skipped %d stored rows, want %d: the first attempt did not land whole", s.skippedOnRetry.Load(), n)
			}
			wantRows(t, o, "calls", "id", n)

			// The same for a commit: writes, findings and the watermark.
			res := synthResults(recs, recs[n-1].Call.Time)
			p.arm(&cutPlan{after: 32 << 10, dropAck: tc.dropAck})
			if err := s.Commit(context.Background(), res); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			if !p.fired() {
				t.Fatal("the proxy never cut the commit")
			}
			wantRows(t, o, "writes", "(call_id, seq)", len(res.Writes))
			wantRows(t, o, "findings", "id", len(res.Findings))
			wantRows(t, o, "watermarks", "replica", 1)
			if wm, err := s.Watermark(context.Background()); err != nil || !wm.Equal(res.Watermark) {
				t.Errorf("Watermark = %v, %v; want %v", wm, err, res.Watermark)
			}
		})
	}
}

// startTraffic appends batches of batch new calls to s every few
// milliseconds, in the background, until the function it returns is
// called: that one fails t for the calls not acknowledged (an outage must
// not make AppendCalls fail) and returns the IDs of the acknowledged ones.
func startTraffic(t testing.TB, s *Store, batch int) (stop func() (acked map[string]bool)) {
	done := make(chan struct{})
	var acked map[string]bool
	var errs []error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		acked, errs = traffic(t, s, done, batch)
	}()
	return func() map[string]bool {
		t.Helper()
		close(done)
		wg.Wait()
		if len(errs) > 0 {
			t.Errorf("%d AppendCalls failed during the outage; first: %v", len(errs), errs[0])
		}
		return acked
	}
}

// traffic appends batches of new calls every few milliseconds until stop is
// closed, and returns the IDs of the acknowledged calls and the errors.
func traffic(t testing.TB, s *Store, stop <-chan struct{}, batch int) (acked map[string]bool, errs []error) {
	t.Helper()
	acked = map[string]bool{}
	start := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return acked, errs
		default:
		}
		recs := synthCalls(t, batch, start.Add(time.Duration(i)*time.Second), "traffic-"+strconv.Itoa(i))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		_, err := s.AppendCalls(ctx, recs)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range recs {
			acked[r.Call.ID] = true
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkAcked checks that every acknowledged call is stored exactly once.
func checkAcked(t testing.TB, s *Store, o Options, acked map[string]bool) {
	t.Helper()
	found := map[string]bool{}
	err := s.ScanCalls(context.Background(), time.Time{}, func(r *audit.Record) error {
		c := r.Call
		if found[c.ID] {
			return fmt.Errorf("call %s returned twice", c.ID)
		}
		found[c.ID] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	missing := 0
	for id := range acked {
		if !found[id] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d acknowledged calls are missing", missing, len(acked))
	}
	wantRows(t, o, "calls", "id", len(acked))
}

// TestOutage_Proxy takes ClickHouse away (every connection refused) while
// calls flow, then brings it back: AppendCalls keeps acknowledging (into the
// spool), Ready reports the outage, and afterwards every acknowledged call
// is stored once.
func TestOutage_Proxy(t *testing.T) {
	o := testOptions(t)
	p, dsn := newProxy(t, o.DSN)
	o.DSN = dsn
	s := openStore(t, o)
	stop := startTraffic(t, s, 200)
	time.Sleep(500 * time.Millisecond)
	p.setDown(true)
	deadline := time.Now().Add(10 * time.Second)
	for s.Ready() == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.Ready(); !errors.Is(err, audit.ErrUnavailable) {
		t.Errorf("Ready during the outage = %v, want ErrUnavailable", err)
	}
	time.Sleep(3 * time.Second)
	if n, _ := s.spool.usage(); n == 0 {
		t.Error("nothing was spooled during the outage")
	}
	p.setDown(false)
	time.Sleep(time.Second)
	acked := stop()
	waitReady(t, s, 60*time.Second)
	checkAcked(t, s, o, acked)
	t.Logf("%d calls acknowledged across the outage", len(acked))
}

// TestOutage_ServerStopped stops the real server while calls flow and starts
// it again. MCPAUDIT_CLICKHOUSE_OUTAGE sets how long it stays down (default
// 5s; the figure is 60s: MCPAUDIT_CLICKHOUSE_OUTAGE=60s).
func TestOutage_ServerStopped(t *testing.T) {
	dsn, ctl := privateServer(t)
	o := testOptions(t)
	o.DSN = dsn
	down := 5 * time.Second
	if v := os.Getenv("MCPAUDIT_CLICKHOUSE_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("MCPAUDIT_CLICKHOUSE_OUTAGE: %v", err)
		}
		down = d
	}
	s := openStore(t, o)
	stop := startTraffic(t, s, 200)
	time.Sleep(500 * time.Millisecond)
	ctl("stop")
	time.Sleep(down)
	if err := s.Ready(); !errors.Is(err, audit.ErrUnavailable) {
		t.Errorf("Ready during the outage = %v, want ErrUnavailable", err)
	}
	ctl("start")
	time.Sleep(time.Second)
	acked := stop()
	waitReady(t, s, 2*time.Minute)
	checkAcked(t, s, o, acked)
	t.Logf("%d calls acknowledged across a %s outage", len(acked), down)
}

// TestExactlyOnce_ServerKilled kills the server (SIGKILL) while a large
// batch is being inserted and starts it again.
func TestExactlyOnce_ServerKilled(t *testing.T) {
	dsn, ctl := privateServer(t)
	o := testOptions(t)
	o.DSN = dsn
	o.RetryFor = 20 * time.Second
	s := openStore(t, o)
	recs := synthCalls(t, 50000, time.Date(2026, 11, 4, 9, 0, 0, 0, time.UTC), "killed")
	done := make(chan error, 1)
	go func() { done <- errOnly(s.AppendCalls(context.Background(), recs)) }()
	time.Sleep(150 * time.Millisecond)
	ctl("kill")
	ctl("start")
	if err := <-done; err != nil {
		t.Fatalf("AppendCalls: %v", err)
	}
	waitReady(t, s, 2*time.Minute)
	wantRows(t, o, "calls", "id", len(recs))
}
