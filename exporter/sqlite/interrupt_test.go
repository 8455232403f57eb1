package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// fixtureCalls are the 300 calls of testdata/schema2.db and schema3.db, as
// the generator that wrote them gives them again.
func fixtureCalls(t *testing.T) []audit.Record {
	t.Helper()
	g, err := storetest.NewGenerator(7, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	want := g.Records(300)
	for i := range want {
		want[i].Call.Tenant = []string{"", "acme", "globex"}[i%3]
	}
	return want
}

// copyFixture copies testdata/name into a new directory and returns the
// copy's path.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mcpaudit.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// userVersion reads the schema version of the file at path, and whether
// it holds a table a migration creates and renames (calls3, calls4,
// writes3, writes5): a migration left half done. Its connection has no
// busy timeout, on purpose: after a store's open or Close returned, no
// connection of the store may still hold the file.
func userVersion(t *testing.T, path string) (version int, leftover []string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(`SELECT name FROM sqlite_schema WHERE name IN ('calls3', 'calls4', 'writes3', 'writes5')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		rows.Scan(&name)
		leftover = append(leftover, name)
	}
	return version, leftover
}

// fileRIDs returns the packed id of every call of the file at path by its
// rid, whatever its schema (schema 2 has no tenant column).
func fileRIDs(t *testing.T, path string) map[int64]string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT rid, hex(id) FROM calls`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var rid int64
		var id string
		if err := rows.Scan(&rid, &id); err != nil {
			t.Fatal(err)
		}
		out[rid] = id
	}
	return out
}

// TestOpenContext_InterruptedMigration: a migration whose ctx is cancelled
// half way through its copy of the calls (from OnProgress, as serve's
// SIGTERM does) stops there: OpenContext fails with the context's error
// without building the id index, and the file is whole at the schema it
// had before the step under way (a step that committed stays), with no
// table of the migration left. The next open migrates it to the end, and
// every call is found by its id through an index built in full.
func TestOpenContext_InterruptedMigration(t *testing.T) {
	defer func(a, b int) { migratePage2to3, migratePage3to4 = a, b }(migratePage2to3, migratePage3to4)
	migratePage2to3, migratePage3to4 = 100, 100 // three pages for 300 calls
	for _, tc := range []struct {
		name    string
		fixture string
		// cancelAt is the report of calls part copied at which ctx is
		// cancelled: the steps count from 0 each (2 to 3, then 3 to 4),
		// two such reports each at pages of 100 of 300.
		cancelAt int
		want     int // the schema the file is left at
	}{
		{"schema 2, in 2 to 3", "schema2.db", 1, 2},
		{"schema 2, in 3 to 4 after 2 to 3 committed", "schema2.db", 3, 3},
		{"schema 3, in 3 to 4", "schema3.db", 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := copyFixture(t, tc.fixture)
			before := fileRIDs(t, path)
			if len(before) != 300 {
				t.Fatalf("fixture holds %d calls, want 300", len(before))
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			log, lines := captured(t)
			var partial int
			var steps []string
			s, err := OpenContext(ctx, path, Options{Logger: log, OnProgress: func(p Progress) {
				if len(steps) == 0 || steps[len(steps)-1] != p.Step {
					steps = append(steps, p.Step)
				}
				if p.Step == "migrating the store" && p.Done > 0 && p.Done < p.Total {
					if partial++; partial == tc.cancelAt {
						cancel()
					}
				}
			}})
			if err == nil {
				s.Close()
				t.Fatalf("the open went on after its ctx was cancelled at report %d of the migration (%d such reports)", tc.cancelAt, partial)
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted open: %v, want context.Canceled", err)
			}
			if partial != tc.cancelAt {
				t.Errorf("the migration went on to part report %d after its ctx was cancelled at %d", partial, tc.cancelAt)
			}
			if !slices.Equal(steps, []string{"migrating the store"}) {
				t.Errorf("steps %q, want the migration alone", steps)
			}
			expectLines(t, lines(), "migrating the store:", "migration interrupted")
			if v, leftover := userVersion(t, path); v != tc.want || len(leftover) > 0 {
				t.Fatalf("after the interrupted migration: schema %d with tables %q, want schema %d and none", v, leftover, tc.want)
			}
			if after := fileRIDs(t, path); !maps.Equal(after, before) {
				t.Fatal("the interrupted migration changed the calls")
			}

			s, err = Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatalf("open after an interrupted migration: %v", err)
			}
			defer s.Close()
			if v, leftover := userVersion(t, path); v != schemaVersion || len(leftover) > 0 {
				t.Fatalf("after the next open: schema %d with tables %q, want %d and none", v, leftover, schemaVersion)
			}
			if after := fileRIDs(t, path); !maps.Equal(after, before) {
				t.Fatal("calls changed rids in the migration")
			}
			want := fixtureCalls(t)
			if got := lookupIDs(t, s, ids(want)); !slices.Equal(got, keysOf(want)) {
				t.Fatalf("found %d of 300 migrated calls by id", len(got))
			}
			if mark, n := s.ids.mark.Load(), indexedKeys(t, s); mark != 300 || n != 300 {
				t.Fatalf("id index through rid %d with %d ids, want 300 and 300", mark, n)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if r, err := Verify(context.Background(), path, nil); err != nil || !r.OK() || r.Calls != 300 {
				t.Fatalf("Verify: %+v, %v; want ok with 300 calls", r, err)
			}
		})
	}
}

// TestOpenContext_InterruptedMigrationClosesItsConnections: once an open
// whose ctx was cancelled in a migration has returned, no connection of
// it is open on the file. database/sql rolls back a transaction whose
// context ends on a goroutine of its own, and the migration's deferred
// Rollback then returned at once: OpenContext returned while that
// goroutine was still rolling back and closing the connection, and on a
// loaded CI machine the test above read the file while it was closing
// (SQLITE_BUSY on PRAGMA user_version; flk50). rollbackHook holds a
// rollback made while the migration is stopped in its progress report
// (only database/sql's goroutine can make one then) until the open has
// returned: the late goroutine, which no real part shows on demand.
func TestOpenContext_InterruptedMigrationClosesItsConnections(t *testing.T) {
	defer func(n int) { migratePage3to4 = n }(migratePage3to4)
	migratePage3to4 = 100 // three pages for 300 calls
	path := copyFixture(t, "schema3.db")

	var reporting, held atomic.Bool
	release := make(chan struct{})
	defer func(h func()) { rollbackHook = h }(rollbackHook)
	rollbackHook = func() {
		if reporting.Load() {
			held.Store(true)
			<-release
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := OpenContext(ctx, path, Options{Logger: slog.New(slog.DiscardHandler), OnProgress: func(p Progress) {
		if p.Step != "migrating the store" || p.Done == 0 || p.Done == p.Total || ctx.Err() != nil {
			return
		}
		reporting.Store(true)
		cancel()
		// Let a goroutine that rolls back on ctx's end reach the hook.
		for i := 0; i < 10000 && !held.Load(); i++ {
			runtime.Gosched()
		}
		reporting.Store(false)
	}})
	files := openFiles(t, path)
	close(release)
	if err == nil {
		s.Close()
		t.Fatal("the open went on after its ctx was cancelled in the migration")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted open: %v, want context.Canceled", err)
	}
	if files != 0 {
		t.Fatalf("%d files of the store still open after the interrupted open returned (its rollback held elsewhere: %v)", files, held.Load())
	}
	if v, leftover := userVersion(t, path); v != 3 || len(leftover) > 0 {
		t.Fatalf("after the interrupted migration: schema %d with tables %q, want schema 3 and none", v, leftover)
	}
}

// TestOpenContext_InterruptedIndexBuild: a build of the id index whose ctx
// is cancelled half way stops there: OpenContext fails with the context's
// error and releases the index. The next open rebuilds it (its build did
// not finish: it has no epoch), not taking the part built for whole, and
// every call is found by its id through it.
func TestOpenContext_InterruptedIndexBuild(t *testing.T) {
	path := copyFixture(t, "schema3.db")
	s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(IDIndexDir(path)); err != nil {
		t.Fatal(err)
	}

	defer func(n int) { idsPage = n }(idsPage)
	idsPage = 100 // three batches for 300 calls
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log, lines := captured(t)
	var last Progress
	s, err = OpenContext(ctx, path, Options{Logger: log, OnProgress: func(p Progress) {
		last = p
		if p.Step == "building the call id index" && p.Done > 0 && p.Done < p.Total {
			cancel()
		}
	}})
	if err == nil {
		s.Close()
		t.Fatal("the open went on after its ctx was cancelled in the build of the id index")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted open: %v, want context.Canceled", err)
	}
	if last.Done != 100 || last.Total != 300 {
		t.Errorf("the build's last report %+v, want it stopped at 100 of 300", last)
	}
	expectLines(t, lines(), "building the call id index:", "building the call id index interrupted")

	// The index holds 100 calls and its mark: the next open rebuilds it.
	s, err = Open(path, Options{Logger: log})
	if err != nil {
		t.Fatalf("open after an interrupted build: %v", err)
	}
	defer s.Close()
	got := expectLines(t, lines(), "rebuilding the call id index:", "built the call id index")
	if want := "the index has no epoch: its build did not finish"; got[0].Reason != want {
		t.Errorf("rebuild for %q, want %q", got[0].Reason, want)
	}
	expectCount(t, "rebuild end", got[1].Calls, 300)
	want := fixtureCalls(t)
	if found := lookupIDs(t, s, ids(want)); !slices.Equal(found, keysOf(want)) {
		t.Fatalf("found %d of 300 calls by id", len(found))
	}
	if mark, n := s.ids.mark.Load(), indexedKeys(t, s); mark != 300 || n != 300 {
		t.Fatalf("id index through rid %d with %d ids, want 300 and 300", mark, n)
	}
}

// TestOpenContext_InterruptedWaitForIndex: a store waiting for the id
// index another process holds (serve's IDIndexWait, 30 s) stops waiting
// once its ctx is done and fails with the context's error, rather than
// waiting on and then opening without the index.
func TestOpenContext_InterruptedWaitForIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	holder, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logged syncBuffer
	done := make(chan error, 1)
	go func() {
		s, err := OpenContext(ctx, path, Options{Logger: slog.New(slog.NewJSONHandler(&logged, nil)), IDIndexWait: time.Minute})
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	// Cancelled once it waits: it has said so.
	for !strings.Contains(logged.String(), `"msg":"waiting for the call id index`) {
		select {
		case err := <-done:
			t.Fatalf("the open ended without waiting for the index: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("open cancelled while waiting for the index: %v, want context.Canceled", err)
	}
}

// syncBuffer is a buffer a logger on another goroutine writes to.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
