package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// storedPending counts, per partition, the writes the store holds as
// pending: what a reader of /api/v1/writes sees as not final.
func storedPending(t testing.TB, st audit.Store) map[detect.PartitionKey]int {
	t.Helper()
	m := map[detect.PartitionKey]int{}
	for cur := ""; ; {
		pg, err := st.Writes(context.Background(), audit.WriteQuery{Limit: 1000, Cursor: cur})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range pg.Writes {
			if w.State == audit.StatePending {
				m[detect.PartitionKey{Tenant: w.Tenant, Server: w.Server}]++
			}
		}
		if cur = pg.NextCursor; cur == "" {
			return m
		}
	}
}

// checkPendingCount compares the status' pending_writes, per partition,
// with the writes the store holds as pending (the status commits what was
// judged before it answers), and returns the status' total.
func checkPendingCount(t testing.TB, r *run, when string) int {
	t.Helper()
	parts, _, unstored := r.p.Report()
	if unstored > 0 {
		t.Fatalf("%s: %d unstored", when, unstored)
	}
	got := map[detect.PartitionKey]int{}
	total := 0
	for _, p := range parts {
		if p.Pending < 0 {
			t.Errorf("%s: %s counts %d pending writes", when, p.Server, p.Pending)
		}
		if p.Pending != 0 {
			got[p.PartitionKey] = p.Pending
		}
		total += p.Pending
	}
	want := storedPending(t, r.store)
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %s/%s: status counts %d pending writes, the store holds %d", when, k.Tenant, k.Server, got[k], n)
		}
	}
	for k, n := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s/%s: status counts %d pending writes, the store holds none", when, k.Tenant, k.Server, n)
		}
	}
	return total
}

// pendingSeconds steps the clock a second at a time for steps seconds and
// returns how many of them the status' count of pending writes differed
// from the store's, and the first such difference.
func pendingSeconds(t testing.TB, r *run, steps int) (n int, first string) {
	t.Helper()
	for i := range steps {
		parts, _, _ := r.p.Report()
		got := 0
		for _, p := range parts {
			got += p.Pending
		}
		want := 0
		for _, m := range storedPending(t, r.store) {
			want += m
		}
		if got != want {
			if n == 0 {
				first = fmt.Sprintf("+%ds: the status counts %d pending, the store holds %d", i, got, want)
			}
			n++
		}
		r.clock.Add(time.Second)
	}
	return n, first
}

// TestPendingCount_RestartAfterWindowClosedOnWallClock: a write left
// pending whose window closed on the wall clock (a quiet poster) is stored
// unverified; after a restart, the replay judges it pending again and the
// gate drops that: the status must not count it pending while the store
// says unverified.
func TestPendingCount_RestartAfterWindowClosedOnWallClock(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	t0 := wallStart.Add(-time.Minute)
	sendPendingThenReads(t, r, t0)
	clock.Add(3 * time.Second) // past a new partition's join wait
	if n := checkPendingCount(t, r, "after the write"); n != 1 {
		t.Errorf("after the write: %d pending, want 1", n)
	}
	for range 40 {
		clock.Add(30 * time.Second)
		r.status()
	}
	if n := checkPendingCount(t, r, "after the window closed"); n != 0 {
		t.Errorf("after the window closed: %d pending, want 0", n)
	}
	r.stop()
	for i := range 3 {
		clock.Add(time.Second)
		r = openRun(t, dir, clock, nil, nil)
		checkPendingCount(t, r, "right after restart")
		for range 10 {
			clock.Add(time.Second)
			checkPendingCount(t, r, "after restart")
		}
		r.stop()
		_ = i
	}
}

// TestPendingCount_RestartWindowOpenAtStop: the window is still open at a
// stop (a delivering poster), and ends while the collector is down or
// during the restart hold; the count follows the store through it.
func TestPendingCount_RestartWindowOpenAtStop(t *testing.T) {
	for _, down := range []time.Duration{time.Second, 2 * time.Minute, 10 * time.Minute} {
		t.Run(down.String(), func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock(wallStart)
			r := openRun(t, dir, clock, nil, nil)
			t0 := wallStart.Add(-time.Minute)
			sendPendingThenReads(t, r, t0)
			clock.Add(3 * time.Second)
			checkPendingCount(t, r, "before the stop")
			r.stop()
			clock.Add(down)
			r = openRun(t, dir, clock, nil, nil)
			for i := range 100 {
				checkPendingCount(t, r, "after restart +"+time.Duration(i*5*int(time.Second)).String())
				clock.Add(5 * time.Second)
			}
			if n := checkPendingCount(t, r, "at the end"); n != 0 {
				t.Errorf("%d pending after every window ended", n)
			}
			r.stop()
		})
	}
}

// TestPendingCount_GeneratedTrafficWithCrashesAndRestarts: generated
// traffic (two pods per server, findings and pending writes) delivered in
// requests, with clean restarts and crashes; after every few requests the
// status' count of pending writes equals, per partition, what the store
// holds pending, and both reach 0 once every window has closed.
func TestPendingCount_GeneratedTrafficWithCrashesAndRestarts(t *testing.T) {
	plan, _ := makePlan(t, 7, 300, 6)
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	seen := 0
	for i := 0; i < len(plan); i++ {
		b := audit.Batch{Source: plan[i].source, Records: decode(t, plan[i].lines)}
		switch {
		case i > 0 && i%37 == 0:
			// A crash before the request is acknowledged: sent again.
			r.cs.crash()
			r.ingest(b)
			r.die()
			clock.Add(2 * time.Second)
			r = openRun(t, dir, clock, nil, nil)
			checkPendingCount(t, r, "after a crash")
		case i > 0 && i%23 == 0:
			r.stop()
			clock.Add(5 * time.Second)
			r = openRun(t, dir, clock, nil, nil)
			checkPendingCount(t, r, "after a restart")
		}
		if _, err := r.ingest(b); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		clock.Add(time.Second)
		if i%5 == 0 {
			seen = max(seen, checkPendingCount(t, r, "during the traffic"))
		}
	}
	t.Logf("%d requests, at most %d writes pending at once", len(plan), seen)
	if seen == 0 {
		t.Fatal("no write was ever pending: the traffic does not test the count")
	}
	for range 60 {
		clock.Add(time.Minute)
		checkPendingCount(t, r, "after the traffic")
	}
	if n := checkPendingCount(t, r, "at the end"); n != 0 {
		t.Errorf("%d pending writes after every window closed", n)
	}
	r.stop()
}
