package sqlite

import (
	"context"
	"crypto/ed25519"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
)

// changedFindings stores 120 calls of acme and globex in six commits, a
// finding of acme at the first call (acknowledged) and one at the 100th
// (resolved), and returns the store, its file, the public key, the
// records and the two findings.
func changedFindings(t *testing.T) (*Store, string, ed25519.PublicKey, []audit.Record, []audit.Finding) {
	t.Helper()
	s, path, pub, _ := openSigned(t, Options{DeleteChunk: 10})
	ctx := context.Background()
	_, recs := tenantRecords(t, 120)
	for i := 0; i < 120; i += 20 {
		if _, err := s.AppendCalls(ctx, recs[i:i+20]); err != nil {
			t.Fatal(err)
		}
	}
	var fs []audit.Finding
	for _, i := range []int{0, 100} {
		r := recs[i]
		fs = append(fs, audit.Finding{Kind: audit.KindUnsafeRetry, Severity: audit.SeverityWarning, Server: r.Call.Server,
			Tenant: "acme", Document: "doc", Time: r.Call.Time, Calls: []string{r.Call.ID}, Summary: "s"})
	}
	if err := s.Commit(ctx, audit.Results{Findings: fs, Watermark: recs[100].Call.Time}); err != nil {
		t.Fatal(err)
	}
	for i, st := range []audit.FindingState{audit.FindingAcknowledged, audit.FindingResolved} {
		if _, err := s.ChangeFinding(ctx, audit.FindingChange{FindingID: fs[i].ID(), Tenant: "acme", State: st, By: "ann", Note: "n",
			Time: recs[100].Call.Time.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	return s, path, pub, recs, fs
}

// TestRetention_ChangesGoWithFinding (review rev19c's D2): retention that
// deletes a finding deletes its state changes (and its current state),
// keeping each change's hash in chain_pruned under a pruned entry, as it
// keeps a deleted call's; the changes of a finding kept stay. Verify finds
// the history honest, and still reports a kept change deleted or edited,
// and a removed change's record deleted or edited, while the cut has not
// reached them.
func TestRetention_ChangesGoWithFinding(t *testing.T) {
	s, path, pub, recs, fs := changedFindings(t)
	ctx := context.Background()
	if _, err := s.DeleteBefore(ctx, recs[60].Call.Time); err != nil {
		t.Fatal(err)
	}
	if h, err := s.FindingHistory(ctx, fs[1].ID(), "acme"); err != nil || len(h) != 1 {
		t.Errorf("the kept finding's history: %v, %v; want its resolution", h, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantClean(t, "after retention took a changed finding", path, pub)
	db := openRaw(t, path)
	var changes, status, records int
	if err := db.QueryRow(`SELECT (SELECT count(*) FROM finding_changes), (SELECT count(*) FROM finding_status),
		(SELECT count(*) FROM chain_pruned p JOIN chain c ON c.tenant = p.tenant AND c.seq = p.seq WHERE c.kind = 'changes')`).
		Scan(&changes, &status, &records); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if changes != 1 || status != 1 || records != 1 {
		t.Fatalf("after retention took one of two changed findings: %d changes, %d states, %d records of changes; want 1, 1, 1", changes, status, records)
	}
	wantTampered(t, "the kept change deleted", edit(t, path, `DELETE FROM finding_changes`), pub,
		"(changes row ", "1 row recorded, 0 found: rows deleted")
	wantTampered(t, "the kept change edited", edit(t, path, `UPDATE finding_changes SET by = 'mallory'`), pub,
		"(changes row ", "contents differ")
	wantTampered(t, "the record of the removed change deleted", edit(t, path,
		`DELETE FROM chain_pruned WHERE (tenant, seq) IN (SELECT tenant, seq FROM chain WHERE kind = 'changes')`), pub,
		"records of removed rows deleted")
	wantTampered(t, "the record of the removed change edited", edit(t, path,
		`UPDATE chain_pruned SET hash = zeroblob(32) WHERE (tenant, seq) IN (SELECT tenant, seq FROM chain WHERE kind = 'changes')`), pub,
		"a record was edited")
}

// TestUpgrade_ChangesOfDeletedFindings opens a store main left before
// ch20 (testdata/chain19-change.db, made at 2cf684b with the key beside
// it: 120 calls, a finding deleted by retention whose acknowledgement
// stayed, a finding kept with its resolution). It verifies clean before
// and after this release's retention, which deletes the change of the
// deleted finding and then cuts past every entry.
func TestUpgrade_ChangesOfDeletedFindings(t *testing.T) {
	path := copyFixture(t, "chain19-change.db")
	priv, err := chain.ReadPrivateKey(filepath.Join("testdata", "chain19-change-signing.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pub := priv.Public().(ed25519.PublicKey)
	wantClean(t, "before the upgrade", path, pub)
	s, err := Open(path, Options{SigningKey: priv, DeleteChunk: 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The fixture's cutoff again: only the change left behind goes.
	if _, err := s.DeleteBefore(ctx, time.Date(2026, 11, 2, 12, 25, 33, 893e6, time.UTC)); err != nil {
		t.Fatal(err)
	}
	db := openRaw(t, path)
	var changes int
	if err := db.QueryRow(`SELECT count(*) FROM finding_changes`).Scan(&changes); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if changes != 1 {
		t.Errorf("%d finding changes after the first retention of this release, want the kept finding's 1", changes)
	}
	wantClean(t, "after the upgrade's first retention", path, pub)
	if _, err := s.DeleteBefore(ctx, time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantClean(t, "after retention of everything", path, pub)
	db = openRaw(t, path)
	defer db.Close()
	var entries, records int
	if err := db.QueryRow(`SELECT (SELECT count(*) FROM chain WHERE kind <> 'cut'), (SELECT count(*) FROM chain_pruned)`).Scan(&entries, &records); err != nil {
		t.Fatal(err)
	}
	if entries > 0 || records > 0 {
		t.Errorf("retention of everything left %d chain entries (but cut entries) and %d records", entries, records)
	}
}
