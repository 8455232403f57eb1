package sqlite

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// TestBadWriteCounts_ClientsOneReadConn: with read_conns: 1, BadWriteCounts with
// Clients held the only reading connection in its transaction and then
// asked the pool for another (callsByID) for the writes whose call is not
// at their time: it waited until ctx ended (found by review13a).
func TestBadWriteCounts_ClientsOneReadConn(t *testing.T) {
	s := openTemp(t, Options{ReadConns: 1})
	storetest.BadWriteMix(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := s.BadWriteCounts(ctx, audit.BadWriteQuery{Top: 10, Clients: true})
	t.Logf("BadWriteCounts(Clients) with read_conns 1: %s, err=%v", time.Since(start), err)
	if err != nil {
		t.Fatalf("BadWriteCounts with read_conns 1 fails: %v", err)
	}
}

// TestBadWriteCounts_ClientsConcurrent: more concurrent reports (different
// tenants or servers of /slo, or /api/v1/report) than read_conns: each held
// a connection and waited for another, until their contexts ended.
func TestBadWriteCounts_ClientsConcurrent(t *testing.T) {
	s := openTemp(t, Options{})
	storetest.BadWriteMix(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 16)
	start := time.Now()
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.BadWriteCounts(ctx, audit.BadWriteQuery{Top: 10, Clients: true})
		}()
	}
	wg.Wait()
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
		}
	}
	t.Logf("16 concurrent BadWriteCounts(Clients), read_conns 4: %s, %d failed, first err=%v", time.Since(start), n, errs[0])
	if n > 0 {
		t.Fatalf("%d of 16 concurrent reports failed", n)
	}
}

// TestBadWriteCounts_ClientsDoNotStallReaders: read_conns (4) concurrent
// reports with clients stalled every other read of the store while they
// waited; the old paged path (storetest.PagedBadWriteCounts) and the counts
// without clients with read_conns 1 alongside.
func TestBadWriteCounts_ClientsDoNotStallReaders(t *testing.T) {
	s := openTemp(t, Options{})
	storetest.BadWriteMix(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.BadWriteCounts(ctx, audit.BadWriteQuery{Top: 10, Clients: true})
		}()
	}
	time.Sleep(time.Second)
	wctx, wcancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err := s.WriteCounts(wctx, audit.CountQuery{})
	wcancel()
	t.Logf("WriteCounts while 4 reports wait: err=%v", err)
	wg.Wait()
	one := openTemp(t, Options{ReadConns: 1})
	storetest.BadWriteMix(t, one)
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	_, perr := storetest.PagedBadWriteCounts(pctx, one, audit.BadWriteQuery{Top: 10, Clients: true})
	t.Logf("old paged path, read_conns 1: err=%v", perr)
	_, nerr := one.BadWriteCounts(pctx, audit.BadWriteQuery{Top: 10})
	t.Logf("BadWriteCounts without Clients, read_conns 1: err=%v", nerr)
	if err != nil {
		t.Fatalf("a plain WriteCounts fails while 4 reports wait: %v", err)
	}
}

// TestWriteCountsByRange_Before1970: a window whose first bound is before
// 1970 skipped the write_hours read, but its whole-hour ranges after 1970
// still left their whole hours to it: their writes were not counted
// (found by review13a).
func TestWriteCountsByRange_Before1970(t *testing.T) {
	s := openTemp(t, Options{})
	ctx := context.Background()
	epoch := time.Unix(0, 0).UTC()
	var ws []audit.Write
	for i, at := range []time.Time{epoch.Add(-2 * time.Hour), epoch.Add(3 * time.Hour), epoch.Add(5 * time.Hour), epoch.Add(30 * time.Hour)} {
		ws = append(ws, audit.Write{CallID: fmt.Sprintf("c%d", i), Time: at, Server: "srv", Tool: "t", State: audit.StateUnverified})
	}
	if err := s.Commit(ctx, audit.Results{Writes: ws}); err != nil {
		t.Fatal(err)
	}
	bounds := []time.Time{epoch.Add(-3 * time.Hour), epoch, epoch.Add(24 * time.Hour), epoch.Add(48 * time.Hour)}
	got, err := s.WriteCountsByRange(ctx, audit.CountQuery{}, bounds)
	if err != nil {
		t.Fatal(err)
	}
	want, err := storetest.PagedWriteCountsByRange(ctx, s, audit.CountQuery{}, bounds)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("WriteCountsByRange %v; one WriteCounts per range %v", got, want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ranges differ")
	}
}
