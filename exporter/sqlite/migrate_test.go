package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
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
	raw, err := os.ReadFile("testdata/schema2.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mcpaudit.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("opening a schema-2 store: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	var version int
	if err := s.w.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != 3 {
		t.Fatalf("schema version %d, %v; want 3", version, err)
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
	raw, err := os.ReadFile("testdata/schema2.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mcpaudit.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
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
