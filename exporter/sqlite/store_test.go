package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

func openTemp(t testing.TB, opts Options) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "audit.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) audit.Store { return openTemp(t, Options{}) })
}

// TestConformance_SmallChunks runs the suite with retention deleting one
// row per transaction and no group commit beyond one request.
func TestConformance_SmallChunks(t *testing.T) {
	storetest.Run(t, func(t *testing.T) audit.Store { return openTemp(t, Options{DeleteChunk: 1, MaxBatch: 1}) })
}

// side opens a second connection to the store's file, for what a test must
// do behind the store's back.
func side(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func records(t testing.TB, n int) []audit.Record {
	t.Helper()
	g, err := storetest.NewGenerator(5, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	return g.Records(n)
}

func count(t *testing.T, s *Store) int {
	t.Helper()
	n := 0
	if err := s.ScanCalls(context.Background(), time.Time{}, func(*audit.Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestGroupCommit checks that concurrent appends share transactions and
// that every caller returns only after its calls are committed.
func TestGroupCommit(t *testing.T) {
	var commits, committed atomic.Int64
	s := openTemp(t, Options{MaxDelay: 20 * time.Millisecond, OnCommit: func(_ time.Duration, calls int) {
		commits.Add(1)
		committed.Add(int64(calls))
	}})
	defer s.Close()
	recs := records(t, 400)
	var wg sync.WaitGroup
	for w := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := recs[w*10 : w*10+10]
			if _, err := s.AppendCalls(context.Background(), batch); err != nil {
				t.Error(err)
				return
			}
			// Acknowledged: visible to any reader now.
			for _, r := range batch {
				if firstDoc(r) == "" {
					continue
				}
				events, err := eventsOf(s.Timeline(context.Background(), audit.TimelineQuery{Document: firstDoc(r)}))
				if err != nil {
					t.Error(err)
					return
				}
				if !hasCall(events, r.Call.ID) {
					t.Errorf("call %s acknowledged but not visible", r.Call.ID)
				}
			}
		}()
	}
	wg.Wait()
	if got := count(t, s); got != 400 {
		t.Fatalf("stored %d calls, want 400", got)
	}
	if committed.Load() != 400 || commits.Load() >= 40 {
		t.Errorf("%d calls in %d commits: want 400 in fewer commits than the 40 callers", committed.Load(), commits.Load())
	}
	t.Logf("40 callers, %d commits", commits.Load())
}

func firstDoc(r audit.Record) string {
	if len(r.Documents()) == 0 {
		return ""
	}
	return r.Documents()[0]
}

func hasCall(events []audit.TimelineEvent, id string) bool {
	for _, e := range events {
		if e.Type == audit.EventCall && e.CallID == id {
			return true
		}
	}
	return false
}

// TestGroupCommit_ErrorToEveryCaller makes one call of a shared
// transaction fail: every caller of that batch gets the error, and none of
// their calls is stored.
func TestGroupCommit_ErrorToEveryCaller(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	var commits atomic.Int64
	s, err := Open(path, Options{MaxDelay: 200 * time.Millisecond, OnCommit: func(time.Duration, int) { commits.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := records(t, 50)
	poison := recs[25].Call.Time
	n, _ := nanos(poison)
	if _, err := side(t, path).Exec(fmt.Sprintf(`CREATE TRIGGER poison BEFORE INSERT ON calls
		WHEN NEW.time = %d BEGIN SELECT RAISE(ABORT, 'injected failure'); END`, n)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for w := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[w] = s.AppendCalls(context.Background(), recs[w*10:w*10+10])
		}()
	}
	wg.Wait()
	if commits.Load() != 0 {
		t.Fatalf("%d commits succeeded: the five callers were not batched together; the test needs a longer MaxDelay", commits.Load())
	}
	for w, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "injected failure") {
			t.Errorf("caller %d: %v, want the injected failure", w, err)
		}
		if errors.Is(err, audit.ErrUnavailable) {
			t.Errorf("caller %d: a constraint failure is not ErrUnavailable: %v", w, err)
		}
	}
	if got := count(t, s); got != 0 {
		t.Errorf("%d calls stored from failed batches, want 0", got)
	}
	// The store goes on: a batch without the poisoned call commits.
	if _, err := s.AppendCalls(context.Background(), recs[:10]); err != nil {
		t.Fatal(err)
	}
	if got := count(t, s); got != 10 {
		t.Errorf("stored %d calls after the failure, want 10", got)
	}
}

// TestReopen checks that what was acknowledged is there after a restart:
// calls, writes, findings, the watermark and interned strings.
func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	recs := records(t, 100)
	if _, err := s.AppendCalls(ctx, recs); err != nil {
		t.Fatal(err)
	}
	w := audit.Write{CallID: recs[0].Call.ID, Time: recs[0].Call.Time, Server: "thegram", Tool: "gram_patch",
		State: audit.StatePending, Reason: audit.ReasonSyncNotConfirmed}
	if err := s.Commit(ctx, audit.Results{Writes: []audit.Write{w}, Watermark: recs[99].Call.Time}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := count(t, s); got != 100 {
		t.Errorf("%d calls after reopening, want 100", got)
	}
	if wm, err := s.Watermark(ctx); err != nil || !wm.Equal(recs[99].Call.Time) {
		t.Errorf("watermark after reopening = %v, %v; want %v", wm, err, recs[99].Call.Time)
	}
	// The interned strings of the first run are found again.
	w.State, w.Reason = audit.StateDurable, ""
	if err := s.Commit(ctx, audit.Results{Writes: []audit.Write{w}}); err != nil {
		t.Fatal(err)
	}
	counts, err := s.WriteCounts(ctx, audit.CountQuery{Server: "thegram"})
	if err != nil || len(counts) != 1 || counts[audit.StateDurable] != 1 {
		t.Errorf("WriteCounts after reopening = %v, %v; want one durable write", counts, err)
	}
}

func TestOpen_Refuses(t *testing.T) {
	dir := t.TempDir()
	f := func(name string, setup string, wantErr string) {
		t.Helper()
		path := filepath.Join(dir, name, "audit.db")
		if setup != "" {
			if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(setup); err != nil {
				t.Fatal(err)
			}
			db.Close()
		}
		s, err := Open(path, Options{})
		if err == nil {
			s.Close()
			t.Fatalf("%s: Open succeeded", name)
		}
		if !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: %v, want %q", name, err, wantErr)
		}
	}
	f("newer schema", `PRAGMA user_version = 99`, "schema version 99")
	f("foreign file", `CREATE TABLE other (x)`, "not a store")
	f("missing directory", "", "cannot open store")
	if _, err := Open(filepath.Join(dir, "x.db"), Options{Synchronous: "off"}); err == nil || !strings.Contains(err.Error(), "synchronous") {
		t.Errorf("Open with synchronous=off = %v, want refused", err)
	}
}

func TestOptions_Validate(t *testing.T) {
	f := func(o Options, want string) {
		t.Helper()
		err := o.Validate()
		switch {
		case want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", o, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%+v: %v, want %q", o, err, want)
		}
	}
	f(Options{}, "")
	f(NewDefaultOptions(), "")
	f(Options{Synchronous: "NORMAL"}, "")
	f(Options{Synchronous: "off"}, "synchronous")
	f(Options{MaxBatch: -1}, "max_batch")
	f(Options{MaxDelay: -time.Second}, "max_delay")
	f(Options{DeleteChunk: -1, ReadConns: -2}, "read_conns")
	f(Options{ReadCacheMiB: -1}, "read_cache_mib")
}

// TestOptions_Caches: the writing and the reading connections take the
// page caches of their options.
func TestOptions_Caches(t *testing.T) {
	for _, o := range []Options{{}, {CacheMiB: 5, ReadCacheMiB: 3}} {
		s, err := Open(filepath.Join(t.TempDir(), "audit.db"), o)
		if err != nil {
			t.Fatal(err)
		}
		want := o.withDefaults()
		var w, r int
		if err := s.w.QueryRow(`PRAGMA cache_size`).Scan(&w); err != nil {
			t.Fatal(err)
		}
		if err := s.r.QueryRow(`PRAGMA cache_size`).Scan(&r); err != nil {
			t.Fatal(err)
		}
		s.Close()
		// A negative cache_size is in KiB.
		if w != -want.CacheMiB<<10 || r != -want.ReadCacheMiB<<10 {
			t.Errorf("%+v: cache_size %d (writer), %d (reader); want -%d, -%d KiB", o, w, r, want.CacheMiB<<10, want.ReadCacheMiB<<10)
		}
	}
}

// TestCorruptRow checks that a damaged call blob is reported, not a panic.
func TestCorruptRow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.AppendCalls(ctx, records(t, 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := side(t, path).Exec(`UPDATE calls SET rec = x'01ffffff' WHERE rid = 2`); err != nil {
		t.Fatal(err)
	}
	err = s.ScanCalls(ctx, time.Time{}, func(*audit.Record) error { return nil })
	if err == nil || !errors.Is(err, errCorrupt) {
		t.Errorf("ScanCalls over a corrupt row = %v, want errCorrupt", err)
	}
	// Retention still removes it.
	if n, err := s.DeleteBefore(ctx, storetest.T0.Add(24*time.Hour)); err != nil || n != 3 {
		t.Errorf("DeleteBefore = %d, %v; want 3 calls deleted", n, err)
	}
}

// TestDeleteBefore_Chunks checks that retention goes in chunks, lets appends
// in between, and leaves no timeline entries behind.
func TestDeleteBefore_Chunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{DeleteChunk: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	recs := records(t, 200)
	if _, err := s.AppendCalls(ctx, recs[:150]); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- errOnly(s.AppendCalls(ctx, recs[150:])) }()
	n, err := s.DeleteBefore(ctx, recs[100].Call.Time)
	if err != nil || n != 100 {
		t.Fatalf("DeleteBefore = %d, %v; want 100", n, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := count(t, s); got != 100 {
		t.Errorf("%d calls left, want 100", got)
	}
	// The document entries of the deleted calls are gone.
	checkDocIndex(t, s)
}

func TestAppendCalls_BadInput(t *testing.T) {
	s := openTemp(t, Options{})
	defer s.Close()
	ctx := context.Background()
	good := records(t, 1)[0]
	f := func(name string, r audit.Record) {
		t.Helper()
		if _, err := s.AppendCalls(ctx, []audit.Record{good, r}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	f("no call", audit.Record{})
	f("no id", audit.Record{Call: &audit.Call{Time: storetest.T0}})
	f("time out of range", audit.Record{Call: &audit.Call{ID: "x", Time: time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC)}})
	if got := count(t, s); got != 0 {
		t.Errorf("%d calls stored from rejected batches, want 0", got)
	}
	if err := s.Commit(ctx, audit.Results{Writes: []audit.Write{{CallID: "c"}}}); err == nil {
		t.Error("a write without time was accepted")
	}
}

// TestAppendCalls_ContextEnds checks that a caller whose context ends
// returns, and the store stays usable.
func TestAppendCalls_ContextEnds(t *testing.T) {
	s := openTemp(t, Options{})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.AppendCalls(ctx, records(t, 5)); !errors.Is(err, context.Canceled) {
		// The request may have been taken before the context was seen.
		if err != nil {
			t.Fatalf("AppendCalls with an ended context = %v", err)
		}
	}
	if _, err := s.AppendCalls(context.Background(), records(t, 5)); err != nil {
		t.Fatal(err)
	}
	if got := count(t, s); got != 5 {
		t.Errorf("%d calls, want 5", got)
	}
}

// TestQueryPlans checks that the queries use the indexes meant for them: a
// full scan of a big table would pass every other test and fail in
// production.
func TestQueryPlans(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	unverified := s.inv.bad[audit.StateUnverified]
	s.Close()
	db := side(t, path)
	f := func(query string, args []any, want string) {
		t.Helper()
		rows, err := db.Query(`EXPLAIN QUERY PLAN `+query, args...)
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		defer rows.Close()
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		p := strings.Join(plan, "; ")
		if !strings.Contains(p, want) || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("%s\n plan: %s\n want: %s, no temporary b-tree", query, p, want)
		}
	}
	f(`SELECT rid, id, time, rec FROM calls WHERE (time, rid) > (?, ?) ORDER BY time, rid LIMIT ?`, []any{1, 2, 3},
		"USING INDEX calls_time")
	f(`SELECT rid, time, rec FROM calls WHERE time < ? ORDER BY time LIMIT ?`, []any{1, 2}, "USING INDEX calls_time")
	// Lookups by id: the rows the id index names, and those past its mark.
	f(`SELECT rid, id, time, rec FROM calls WHERE rid IN (?, ?)`, []any{1, 2}, "SEARCH calls USING INTEGER PRIMARY KEY (rowid=?)")
	f(`SELECT rid, id, time, rec FROM calls WHERE rid > ? AND id IN (?, ?)`, []any{1, "a", "b"},
		"SEARCH calls USING INTEGER PRIMARY KEY (rowid>?)")
	// The stored call of a key, which an answer completes.
	f(sqlStoredNearKey, []any{1, 3, 2, "a"}, "USING INDEX calls_key")
	// The calls on a document past the index's mark.
	f(`SELECT rid, id, time, rec FROM calls WHERE rid > ?`, []any{1}, "SEARCH calls USING INTEGER PRIMARY KEY (rowid>?)")
	f(`SELECT `+writeColumns+` FROM writes WHERE state = coalesce((SELECT id FROM strs WHERE s = ?), -1)
		AND (time, call_id, seq) > (?, ?, ?) ORDER BY time, call_id, seq LIMIT ?`, []any{"durable", 1, "x", 0, 10},
		"SEARCH writes USING PRIMARY KEY")
	// A timeline call's writes, at its time.
	f(`SELECT `+writeColumns+` FROM writes WHERE time >= ?3 AND time <= ?3 + 1 AND call_id = ?1 AND tenant = ?2`, []any{"x", 0, 1},
		"SEARCH writes USING PRIMARY KEY (time>? AND time<?)")
	// A page of the writes of a bad state, in the order of its partial
	// index; and what the report counts of them, from that index alone.
	f(fmt.Sprintf(`SELECT `+writeColumns+` FROM writes WHERE state = %d AND (time, call_id, seq) > (?, ?, ?) ORDER BY time, call_id, seq LIMIT ?`, unverified),
		[]any{1, "x", 0, 10}, "USING INDEX writes_unverified_counted")
	f(fmt.Sprintf(`SELECT time, call_id, state, server, tenant, tool, reason, document FROM writes WHERE state = %d AND time >= ? AND time < ?`, unverified),
		[]any{1, 2}, "USING COVERING INDEX writes_unverified_counted")
	// The call of a bad write, at the write's time.
	f(`SELECT c.rec FROM calls c WHERE c.time = ? AND c.id = ? AND c.tenant = ? LIMIT 1`, []any{1, "x", 2}, "USING INDEX calls_time (time=?)")
	f(`SELECT `+findingColumns+` FROM findings WHERE kind = ? AND (time, id) > (?, ?) ORDER BY time, id LIMIT ?`,
		[]any{"x", 1, "x", 10}, "USING INDEX findings_time")
	f(`SELECT `+findingColumns+` FROM findings WHERE document = ? AND time >= ? ORDER BY time, id LIMIT ?`,
		[]any{"x", 1, 10}, "USING INDEX findings_document")
	// A session page's findings, newest first.
	f(`SELECT `+findingColumns+statusColumns+findingFrom+` WHERE session = ? ORDER BY time DESC, id DESC LIMIT ?`,
		[]any{"x", 10}, "USING INDEX findings_session")
}

// errOnly drops the count of AppendCalls.
func errOnly(_ int, err error) error { return err }

// TestSessions_IndexedAtOpen: the committer indexes the sessions of the
// calls it stores; calls stored without their session minutes (by a
// version that indexed them in the background) are indexed when the store
// opens, and retention prunes the minutes of deleted calls.
func TestSessions_IndexedAtOpen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "audit.db")
	recs := pool(t, 300)
	session := recs[len(recs)-1].Call.Session
	var want int
	for _, r := range recs {
		if r.Call.Session == session {
			want++
		}
	}
	count := func(s *Store) int {
		t.Helper()
		var n int
		for q := (audit.CallQuery{Session: session}); ; {
			p, err := s.Calls(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			n += len(p.Calls)
			if p.NextCursor == "" {
				return n
			}
			q.Cursor = p.NextCursor
		}
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCalls(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if got := count(s); got != want || want == 0 {
		t.Fatalf("session %q: %d calls right after the append, want %d", session, got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM session_minutes; UPDATE meta SET value = 0 WHERE key = '` + sessionsIndexed + `'`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := count(s); got != want {
		t.Fatalf("session %q: %d calls after reopening an unindexed store, want %d", session, got, want)
	}
	if _, err := s.DeleteBefore(ctx, storetest.T0.Add(1000*time.Hour)); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := s.r.QueryRow(`SELECT count(*) FROM session_minutes`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d session minutes left after every call was deleted (%v)", left, err)
	}
	// The committer indexes them again, a second time too: its cache of
	// the minutes it stored goes with them.
	for range 2 {
		if _, err := s.DeleteBefore(ctx, storetest.T0.Add(1000*time.Hour)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AppendCalls(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	if got := count(s); got != want {
		t.Fatalf("session %q: %d calls stored again after retention, want %d", session, got, want)
	}
}

// TestSessions_OpenAfterNewestDeleted: when the calls with the highest rids
// go (a tenant deleted, or a backfill of old calls expired) while older
// rids stay, the index mark is past the last rid. The store must still
// open, and its session queries find the calls that are left.
func TestSessions_OpenAfterNewestDeleted(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "audit.db")
	recs := pool(t, 300)
	var kept, gone []audit.Record
	for i, r := range recs {
		c := *r.Call
		if i < len(recs)/2 {
			c.Tenant = "kept"
			r.Call = &c
			kept = append(kept, r)
		} else {
			c.Tenant, c.ID = "gone", c.ID+"g"
			r.Call = &c
			gone = append(gone, r)
		}
	}
	session := kept[len(kept)-1].Call.Session
	want := 0
	for _, r := range kept {
		if r.Call.Session == session {
			want++
		}
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCalls(ctx, kept); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCalls(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteTenantBefore(ctx, "gone", storetest.T0.Add(1000*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		var err error
		s, err = Open(path, Options{})
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the store does not open within 20 s after the calls with the highest rids were deleted")
	}
	defer s.Close()
	got := 0
	for q := (audit.CallQuery{Session: session, Tenant: "kept"}); ; {
		p, err := s.Calls(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		got += len(p.Calls)
		if p.NextCursor == "" {
			break
		}
		q.Cursor = p.NextCursor
	}
	if got != want || want == 0 {
		t.Fatalf("session %q: %d calls after reopening, want %d", session, got, want)
	}
}

// TestSessions_CacheClearedOnFailure: a transaction that indexed a session
// minute and then failed stored nothing; the committer's cache of stored
// minutes must forget it, or the retry skips the minute and the session's
// query misses its calls.
func TestSessions_CacheClearedOnFailure(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "audit.db")
	recs := pool(t, 2)
	session := recs[0].Call.Session
	if session == "" {
		t.Fatal("the first generated call has no session")
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The second call of the transaction fails, after the first call's
	// session minute was inserted.
	if _, err := db.Exec(`CREATE TRIGGER fail_second BEFORE INSERT ON calls
		WHEN (SELECT count(*) FROM calls) >= 1 BEGIN SELECT RAISE(ABORT, 'injected'); END`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCalls(ctx, recs); err == nil {
		t.Fatal("the append passed the injected failure")
	}
	if _, err := db.Exec(`DROP TRIGGER fail_second`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCalls(ctx, recs); err != nil {
		t.Fatal(err)
	}
	p, err := s.Calls(ctx, audit.CallQuery{Session: session})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Calls) == 0 {
		t.Fatalf("session %q: no call found after the retried append", session)
	}
}

// eventsOf is the events of a timeline page.
func eventsOf(p audit.TimelinePage, err error) ([]audit.TimelineEvent, error) { return p.Events, err }
