package sqlite

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// hoursOf returns write_hours' rows of a nonzero count, and the same
// counts recomputed from the writes; they must be equal.
func hoursOf(t *testing.T, s *Store) (rollup, recount map[hourKey]int64) {
	t.Helper()
	read := func(q string) map[hourKey]int64 {
		rows, err := s.w.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		m := map[hourKey]int64{}
		for rows.Next() {
			var k hourKey
			var n int64
			if err := rows.Scan(&k.hour, &k.tenant, &k.server, &k.state, &n); err != nil {
				t.Fatal(err)
			}
			m[k] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	return read(`SELECT hour, tenant, server, state, n FROM write_hours WHERE n != 0`),
		read(`SELECT time / 3600000000000, tenant, server, state, count(*) FROM writes GROUP BY 1, 2, 3, 4`)
}

// TestWriteHours_CountsAsWrites: write_hours, which the committer keeps
// from schema 7 (upsertWrites) where triggers kept it, holds the count of
// the writes of each hour, tenant, server and state after every kind of
// commit: new writes, re-judged ones (state or server changed, or the
// same), a key twice in one commit, writes re-sent after a reopen (the
// committer's cache of stored writes is empty, so its INSERT OR IGNORE
// finds them stored and falls back to reading them) together with a new
// one, retention deleting some, and deleted writes sent again.
func TestWriteHours_CountsAsWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(9, 24))
	states := []audit.WriteState{audit.StatePending, audit.StateDurable, audit.StateUnverified, audit.StateDoubleApplied}
	var stored []audit.Write // every write committed, its last state
	write := func(n int) audit.Write {
		return audit.Write{
			CallID: fmt.Sprintf("c_%020x", n), Seq: n % 2, Tenant: []string{"", "acme", "beta"}[n%3],
			Time:   storetest.T0.Add(time.Duration(n) * 7 * time.Minute),
			Server: fmt.Sprintf("server-%d", n%3), Tool: "update", Document: fmt.Sprintf("doc-%d", n%5), Key: "k",
			State:  audit.StatePending, Reason: audit.ReasonNoResponse,
		}
	}
	check := func(step string) {
		t.Helper()
		rollup, recount := hoursOf(t, s)
		if !maps.Equal(rollup, recount) {
			t.Fatalf("%s: write_hours %v, the writes count %v", step, rollup, recount)
		}
	}
	next := 0
	for round := range 40 {
		var ws []audit.Write
		// New writes.
		for range rng.IntN(40) {
			w := write(next)
			next++
			ws = append(ws, w)
			stored = append(stored, w)
		}
		// Re-judged ones, some twice in the commit.
		for range rng.IntN(30) {
			if len(stored) == 0 {
				break
			}
			i := rng.IntN(len(stored))
			w := stored[i]
			switch rng.IntN(4) {
			case 0: // the same state again
			case 1:
				w.Server = fmt.Sprintf("server-%d", rng.IntN(3))
				fallthrough
			default:
				w.State, w.Reason = states[rng.IntN(len(states))], ""
				w.StateTime = w.Time.Add(time.Second)
			}
			stored[i] = w
			ws = append(ws, w)
		}
		rng.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
		if err := s.Commit(ctx, audit.Results{Writes: ws}); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("round %d", round))
		switch round % 10 {
		case 4:
			// Reopened: the stored writes re-sent, with new ones, are not
			// known to the committer.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = Open(path, Options{}); err != nil {
				t.Fatal(err)
			}
			resend := append([]audit.Write{write(next)}, stored[:min(len(stored), 50)]...)
			stored = append(stored, resend[0])
			next++
			if err := s.Commit(ctx, audit.Results{Writes: resend}); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("round %d, re-sent after a reopen", round))
		case 7:
			// Retention deletes the oldest writes; a few of them are sent
			// again (the committer stored them, and must forget that).
			cut := stored[len(stored)/4].Time
			if _, err := s.DeleteBefore(ctx, cut); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("round %d, after retention", round))
			var left, gone []audit.Write
			for _, w := range stored {
				if w.Time.Before(cut) {
					gone = append(gone, w)
				} else {
					left = append(left, w)
				}
			}
			gone = gone[:min(len(gone), 5)]
			if err := s.Commit(ctx, audit.Results{Writes: gone}); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("round %d, deleted writes sent again", round))
			stored = append(left, gone...)
		}
	}
	if len(stored) < 200 {
		t.Fatalf("only %d writes stored: the test stored too few to mean much", len(stored))
	}
}

// TestMigrate6to7 opens a store written by schema 6 (testdata/schema6.db:
// testdata/schema5.db opened and closed by the build of main at 90f28e3,
// which migrated it to schema 6) and checks that the triggers counting
// inserts and updates of writes are gone, the delete trigger stays, the
// writes and write counts read back as before, and write_hours keeps
// counting the writes after commits of new and re-judged writes.
func TestMigrate6to7(t *testing.T) {
	path := copyFixture(t, "schema6.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("opening a schema-6 store: %v", err)
	}
	defer s.Close()
	var version int
	if err := s.w.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != 7 {
		t.Fatalf("schema version %d, %v; want 7", version, err)
	}
	var triggers []string
	rows, err := s.w.Query(`SELECT name FROM sqlite_schema WHERE type = 'trigger' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		rows.Scan(&name)
		triggers = append(triggers, name)
	}
	rows.Close()
	if fmt.Sprint(triggers) != "[write_hours_delete]" {
		t.Fatalf("triggers after the migration %v; want [write_hours_delete]", triggers)
	}
	ctx := context.Background()
	rollup, recount := hoursOf(t, s)
	if len(recount) == 0 || !maps.Equal(rollup, recount) {
		t.Fatalf("after the migration write_hours %v, the writes count %v", rollup, recount)
	}
	counts, err := s.WriteCounts(ctx, audit.CountQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, n := range counts {
		total += n
	}
	page, err := s.Writes(ctx, audit.WriteQuery{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	if total != 164 || len(page.Writes) != 164 {
		t.Fatalf("after the migration %d writes counted, %d read; want the fixture's 164", total, len(page.Writes))
	}
	// The stored writes re-judged, and a new one.
	ws := page.Writes[:20]
	for i := range ws {
		ws[i].State, ws[i].Reason = audit.StateDurable, ""
	}
	nw := ws[0]
	nw.CallID, nw.Seq, nw.State = "c_00000000000000000001", 0, audit.StatePending
	ws = append(ws, nw)
	if err := s.Commit(ctx, audit.Results{Writes: ws}); err != nil {
		t.Fatal(err)
	}
	rollup, recount = hoursOf(t, s)
	if !maps.Equal(rollup, recount) {
		t.Fatalf("after a commit write_hours %v, the writes count %v", rollup, recount)
	}
	if counts, err = s.WriteCounts(ctx, audit.CountQuery{}); err != nil {
		t.Fatal(err)
	}
	total = 0
	for _, n := range counts {
		total += n
	}
	if total != 165 {
		t.Fatalf("after a commit %d writes counted (%v); want 165", total, counts)
	}
}
