package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// TestMigrate2to3 opens a store written by schema 2 (testdata/schema2.db:
// 300 generated calls of tenants "", acme and globex, 60 writes, one
// acknowledged finding) and checks that everything reads back and that
// calls are then unique per tenant.
func TestMigrate2to3(t *testing.T) {
	path := copyFixture(t, "schema2.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("opening a schema-2 store: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	var version int
	if err := s.w.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != schemaVersion {
		t.Fatalf("schema version %d, %v; want %d", version, err, schemaVersion)
	}

	// The generator that made the file gives the same calls again.
	g, err := storetest.NewGenerator(7, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	want := g.Records(300)
	for i := range want {
		want[i].Call.Tenant = []string{"", "acme", "globex"}[i%3]
	}
	got := map[string]*audit.Record{}
	if err := s.ScanCalls(ctx, time.Time{}, func(r *audit.Record) error {
		got[r.Call.Tenant+"/"+r.Call.ID] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 300 {
		t.Fatalf("%d calls after migration, want 300", len(got))
	}
	for i := range want {
		r := got[want[i].Call.Tenant+"/"+want[i].Call.ID]
		if r == nil || r.Call.Session != want[i].Call.Session || string(r.Call.Arguments) != string(want[i].Call.Arguments) {
			t.Fatalf("call %d (%s of %q) not read back after migration", i, want[i].Call.ID, want[i].Call.Tenant)
		}
	}
	for _, tenant := range []string{"", "acme", "globex"} {
		p, err := s.Calls(ctx, audit.CallQuery{Tenant: tenant, Document: want[0].Documents()[0]})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Calls {
			if tenant != "" && r.Call.Tenant != tenant {
				t.Errorf("document index after migration gives %q's call to %q", r.Call.Tenant, tenant)
			}
		}
	}

	// Writes, their counts (the rollup is rebuilt) and the lifecycle.
	ws, err := s.Writes(ctx, audit.WriteQuery{Limit: 1000})
	if err != nil || len(ws.Writes) != 60 {
		t.Fatalf("writes after migration: %d, %v; want 60", len(ws.Writes), err)
	}
	counts, err := s.WriteCounts(ctx, audit.CountQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range audit.WriteStates {
		if counts[st] != 10 {
			t.Errorf("WriteCounts after migration = %v, want 10 of each state", counts)
			break
		}
	}
	fs, err := s.Findings(ctx, audit.FindingQuery{Tenant: "acme"})
	if err != nil || len(fs.Findings) != 1 || fs.Findings[0].StateOf() != audit.FindingAcknowledged {
		t.Fatalf("findings after migration: %+v, %v; want the acknowledged one", fs.Findings, err)
	}

	// Now unique per tenant: another tenant's copies are stored.
	var copies []audit.Record
	for _, r := range want[:10] {
		c := *r.Call
		c.Tenant = "initech"
		r.Call = &c
		copies = append(copies, r)
	}
	if n, err := s.AppendCalls(ctx, copies); err != nil || n != 10 {
		t.Fatalf("another tenant's copies after migration: %d stored, %v; want 10", n, err)
	}
	if n, err := s.AppendCalls(ctx, want[:10]); err != nil || n != 0 {
		t.Fatalf("the same tenants' calls again: %d stored, %v; want 0", n, err)
	}
	// The migrated history was chained: it verifies, and an edit of it
	// is caught.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Verify(ctx, path, nil)
	if err != nil || !r.OK() || r.Calls != 310 || r.Findings != 1 || r.Changes != 1 {
		t.Fatalf("Verify after migration: %+v, %v; want ok with 310 calls, 1 finding, 1 change", r, err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DELETE FROM calls WHERE rid = 42`); err != nil {
		t.Fatal(err)
	}
	if r, err := Verify(ctx, path, nil); err != nil || r.OK() {
		t.Fatalf("Verify after deleting a migrated call: %+v, %v; want it reported", r, err)
	}
}

// TestMigrate2to3_FailureKeepsSchema2: a migration that fails leaves the
// file as it was.
func TestMigrate2to3_FailureKeepsSchema2(t *testing.T) {
	path := copyFixture(t, "schema2.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	// A row whose record cannot be decoded stops the migration.
	if _, err := db.Exec(`UPDATE calls SET rec = x'02ffff' WHERE rid = 7`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if s, err := Open(path, Options{}); err == nil {
		s.Close()
		t.Fatal("Open migrated a store with an undecodable call")
	} else if want := "row 7"; !strings.Contains(err.Error(), want) {
		t.Fatalf("Open = %v, want it to name %q", err, want)
	}
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var version, calls int
	db.QueryRow(`PRAGMA user_version`).Scan(&version)
	db.QueryRow(`SELECT count(*) FROM calls`).Scan(&calls)
	if version != 2 || calls != 300 {
		t.Fatalf("after the failed migration: version %d, %d calls; want 2 and 300", version, calls)
	}
}

// TestMigrate3to4 opens a store written by schema 3 (testdata/schema3.db:
// the 300 generated calls of TestMigrate2to3 in rids 1-300, and ten older
// calls given rids 301-310, then deleted by retention) and checks that the
// calls keep their rids and the highest rid given, are found by id through
// the id index built at open, are still deduplicated, and that the chain
// verifies.
func TestMigrate3to4(t *testing.T) {
	path := copyFixture(t, "schema3.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	before := ridsOf(t, old)
	old.Close()
	if len(before) != 300 {
		t.Fatalf("fixture holds %d calls, want 300", len(before))
	}

	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("opening a schema-3 store: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	var version int
	if err := s.w.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != schemaVersion {
		t.Fatalf("schema version %d, %v; want %d", version, err, schemaVersion)
	}
	var unique int
	if err := s.w.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE tbl_name = 'calls' AND name LIKE 'sqlite_autoindex%'`).Scan(&unique); err != nil || unique != 0 {
		t.Fatalf("calls keeps %d automatic indexes (UNIQUE (id, tenant)), %v; want none", unique, err)
	}
	if after := ridsOf(t, s.w); !maps.Equal(after, before) {
		t.Fatal("calls changed rids in the migration")
	}
	if seq := maxRID(t, s); seq != 310 {
		t.Fatalf("highest rid given %d after the migration, want 310", seq)
	}
	g, err := storetest.NewGenerator(7, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	want := g.Records(300)
	for i := range want {
		want[i].Call.Tenant = []string{"", "acme", "globex"}[i%3]
	}
	if got := lookupIDs(t, s, ids(want)); !slices.Equal(got, keysOf(want)) {
		t.Fatalf("found %d of 300 migrated calls by id", len(got))
	}
	if mark := s.ids.mark.Load(); mark != 300 {
		t.Fatalf("id index built through rid %d, want 300", mark)
	}
	more := withTenant(want[:5], "initech")
	if n, err := s.AppendCalls(ctx, more); err != nil || n != 5 {
		t.Fatalf("another tenant's copies: %d stored, %v; want 5", n, err)
	}
	var first int64
	if err := s.w.QueryRow(`SELECT min(rid) FROM calls WHERE tenant = (SELECT id FROM strs WHERE s = 'initech')`).Scan(&first); err != nil || first != 311 {
		t.Fatalf("the first call after the migration has rid %d, %v; want 311", first, err)
	}
	if n, err := s.AppendCalls(ctx, want); err != nil || n != 0 {
		t.Fatalf("the migrated calls again: %d stored, %v; want 0", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Verify(ctx, path, nil)
	if err != nil || !r.OK() || r.Calls != 305 {
		t.Fatalf("Verify after migration: %+v, %v; want ok with 305 calls", r, err)
	}
}

func ridsOf(t *testing.T, db *sql.DB) map[int64]string {
	t.Helper()
	rows, err := db.Query(`SELECT rid, hex(id) || '/' || tenant FROM calls`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var rid int64
		var key string
		if err := rows.Scan(&rid, &key); err != nil {
			t.Fatal(err)
		}
		out[rid] = key
	}
	return out
}

// TestMigrate4to5 opens a store written by schema 4 (testdata/schema4.db:
// 300 generated calls of mixed traffic in three tenants, with the writes
// and findings the detector derived from them) and checks that the
// document index moved beside the file and writes lost their second key
// without changing an answer: every document's timeline and calls, the
// writes and their counts are those schema 4 gave (testdata/schema4.json,
// written by the same program against main at 986b9c9: see
// docs/storage.md, "Upgrading to schema 5"); that a write still upserts;
// and that the chain verifies.
func TestMigrate4to5(t *testing.T) {
	path := copyFixture(t, "schema4.db")
	var want struct {
		Timelines   map[string][]audit.TimelineEvent
		Writes      []audit.Write
		WriteCounts map[audit.WriteState]int64
		Calls       map[string][]string
	}
	j, err := os.ReadFile("testdata/schema4.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(j, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Timelines) < 20 || len(want.Writes) < 100 {
		t.Fatalf("fixture answers hold %d timelines and %d writes, want 20 and 100 at least", len(want.Timelines), len(want.Writes))
	}
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	before := ridsOf(t, old)
	old.Close()

	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("opening a schema-4 store: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	var version, left int
	// Migrated on to the latest schema (5 to 6 adds too_late only).
	if err := s.w.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != schemaVersion {
		t.Fatalf("schema version %d, %v; want %d", version, err, schemaVersion)
	}
	if err := s.w.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = 'call_documents'
		OR (tbl_name = 'writes' AND name LIKE 'sqlite_autoindex%')`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d of call_documents and writes' unique key left, %v; want none", left, err)
	}
	if after := ridsOf(t, s.w); !maps.Equal(after, before) {
		t.Fatal("calls changed in the migration")
	}
	checkDocIndex(t, s)
	// Compared as JSON: times decoded from it carry no monotonic reading.
	same := func(what string, got, want any) {
		t.Helper()
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Errorf("%s after the migration:\n %s\nwant (schema 4)\n %s", what, g, w)
		}
	}
	for doc, tl := range want.Timelines {
		got, err := eventsOf(s.Timeline(ctx, audit.TimelineQuery{Document: doc}))
		if err != nil {
			t.Fatal(err)
		}
		// A call event's source, and its revisions and hashes, and every
		// event's tenant (op22) came after the fixture's answers were
		// written: the source is the call's stored source (the capture's
		// line), the revisions are read from its payloads
		// (TestConformance), the tenant is the stored call's (checked
		// against the store's own call below), and otherwise the answer is
		// schema 4's.
		for i := range got {
			if got[i].Type == audit.EventCall && got[i].Source == "" {
				t.Errorf("timeline of %s: call %s without its source", doc, got[i].CallID)
			}
			if got[i].CallID != "" {
				c, err := s.Calls(ctx, audit.CallQuery{IDs: []string{got[i].CallID}, Limit: 10})
				if err != nil {
					t.Fatal(err)
				}
				tenants := map[string]bool{}
				for _, sc := range c.Calls {
					tenants[sc.Call.Tenant] = true
				}
				if !tenants[got[i].Tenant] {
					t.Errorf("timeline of %s: event of call %s with tenant %q, the store holds the call under %v", doc, got[i].CallID, got[i].Tenant, tenants)
				}
			}
			got[i].Source, got[i].Tenant = "", ""
			got[i].RevisionBefore, got[i].RevisionAfter, got[i].HashBefore, got[i].HashAfter = "", "", "", ""
		}
		same("timeline of "+doc, got, tl)
		p, err := s.Calls(ctx, audit.CallQuery{Document: doc, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range p.Calls {
			ids = append(ids, r.Call.ID)
		}
		same("calls on "+doc, ids, want.Calls[doc])
	}
	wp, err := s.Writes(ctx, audit.WriteQuery{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	same("writes", wp.Writes, want.Writes)
	counts, err := s.WriteCounts(ctx, audit.CountQuery{})
	if err != nil {
		t.Fatal(err)
	}
	same("write counts", counts, want.WriteCounts)

	// A write upserts by its key, time first: its state changes, it is not
	// stored twice, and the rollup moves it.
	var w audit.Write
	for _, x := range want.Writes {
		if x.State == audit.StateUnverified {
			w = x
			break
		}
	}
	if w.CallID == "" {
		t.Fatal("fixture has no unverified write")
	}
	w.State, w.Reason = audit.StateDurable, ""
	if err := s.Commit(ctx, audit.Results{Writes: []audit.Write{w}}); err != nil {
		t.Fatal(err)
	}
	if wp, err = s.Writes(ctx, audit.WriteQuery{Limit: 10000}); err != nil {
		t.Fatal(err)
	}
	if len(wp.Writes) != len(want.Writes) {
		t.Fatalf("%d writes after an upsert, want %d", len(wp.Writes), len(want.Writes))
	}
	if counts, err = s.WriteCounts(ctx, audit.CountQuery{}); err != nil {
		t.Fatal(err)
	}
	if counts[audit.StateUnverified] != want.WriteCounts[audit.StateUnverified]-1 ||
		counts[audit.StateDurable] != want.WriteCounts[audit.StateDurable]+1 {
		t.Fatalf("write counts after an upsert %v, want one unverified fewer than %v and one durable more", counts, want.WriteCounts)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Verify(ctx, path, nil)
	if err != nil || !r.OK() || r.Calls != 300 {
		t.Fatalf("Verify after migration: %+v, %v; want ok with 300 calls", r, err)
	}
}

// TestMigrate5to6 opens a store written by schema 5 (testdata/schema5.db:
// testdata/schema4.db opened and closed by the build of main at 5dcc123,
// which migrated it to schema 5) and checks that it gains the table of the
// calls too late and nothing else changes: the calls, writes, write counts
// and findings read back as before, a call too late is kept and read back,
// and the chain verifies.
func TestMigrate5to6(t *testing.T) {
	path := copyFixture(t, "schema5.db")
	answers := func(s *Store) (calls int, writes []audit.Write, counts map[audit.WriteState]int64, findings map[string]bool) {
		t.Helper()
		ctx := context.Background()
		if err := s.ScanCalls(ctx, time.Time{}, func(*audit.Record) error { calls++; return nil }); err != nil {
			t.Fatal(err)
		}
		wp, err := s.Writes(ctx, audit.WriteQuery{Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		if counts, err = s.WriteCounts(ctx, audit.CountQuery{}); err != nil {
			t.Fatal(err)
		}
		if findings, err = s.FindingIDs(ctx, time.Time{}); err != nil {
			t.Fatal(err)
		}
		return calls, wp.Writes, counts, findings
	}
	// What the schema-5 file answers, read without migrating it.
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	var version, wantWrites, wantFindings int
	old.QueryRow(`PRAGMA user_version`).Scan(&version)
	old.QueryRow(`SELECT count(*) FROM writes`).Scan(&wantWrites)
	old.QueryRow(`SELECT count(*) FROM findings`).Scan(&wantFindings)
	old.Close()
	if version != 5 || wantWrites < 100 || wantFindings == 0 {
		t.Fatalf("fixture: schema %d with %d writes and %d findings, want schema 5 with 100 writes and a finding at least", version, wantWrites, wantFindings)
	}

	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("opening a schema-5 store: %v", err)
	}
	defer s.Close()
	if err := s.w.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != schemaVersion {
		t.Fatalf("schema version %d, %v; want %d", version, err, schemaVersion)
	}
	calls, writes, counts, findings := answers(s)
	if calls != 300 || len(writes) != wantWrites || len(findings) != wantFindings {
		t.Fatalf("after the migration %d calls, %d writes, %d findings; want 300, %d, %d", calls, len(writes), len(findings), wantWrites, wantFindings)
	}
	ctx := context.Background()
	if got, err := s.TooLateCalls(ctx, time.Time{}); err != nil || len(got) != 0 {
		t.Fatalf("calls too late after the migration: %v, %v; want none", got, err)
	}
	var first *audit.Record
	if err := s.ScanCalls(ctx, time.Time{}, func(r *audit.Record) error {
		if first == nil {
			first = r
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ref := audit.CallRef{Tenant: first.Call.Tenant, ID: first.Call.ID, Time: first.Call.Time}
	if err := s.Commit(ctx, audit.Results{TooLate: []audit.CallRef{ref}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.TooLateCalls(ctx, time.Time{}); err != nil || len(got) != 1 || got[0].ID != ref.ID || !got[0].Time.Equal(ref.Time) {
		t.Fatalf("calls too late after a commit: %v, %v; want %v", got, err, ref)
	}
	calls2, writes2, counts2, findings2 := answers(s)
	if calls2 != calls || !slices.EqualFunc(writes2, writes, func(a, b audit.Write) bool { return a.CallID == b.CallID && a.Seq == b.Seq && a.State == b.State }) ||
		!maps.Equal(counts2, counts) || !maps.Equal(findings2, findings) {
		t.Fatal("a commit of a call too late changed the calls, writes or findings")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Verify(ctx, path, nil)
	if err != nil || !r.OK() || r.Calls != 300 {
		t.Fatalf("Verify after migration: %+v, %v; want ok with 300 calls", r, err)
	}
}
