package sqlite

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// tamperFixture writes a store with a signing key: 300 calls of two
// tenants in three commits, writes, findings and a state change, closed
// (which signs the last heads). It returns the file and the public key.
func tamperFixture(t *testing.T) (string, ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	s, path, pub, priv := openSigned(t, Options{})
	ctx := context.Background()
	_, recs := tenantRecords(t, 300)
	for i := 0; i < 300; i += 100 {
		if _, err := s.AppendCalls(ctx, recs[i:i+100]); err != nil {
			t.Fatal(err)
		}
	}
	var fs []audit.Finding
	for i := range 6 {
		r := recs[i*10]
		fs = append(fs, audit.Finding{Kind: audit.KindUnsafeRetry, Severity: audit.SeverityWarning, Server: r.Call.Server,
			Tenant: r.Call.Tenant, Document: "doc", Time: r.Call.Time, Calls: []string{r.Call.ID}, Summary: "s"})
	}
	if err := s.Commit(ctx, audit.Results{Findings: fs, Watermark: recs[299].Call.Time}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ChangeFinding(ctx, audit.FindingChange{FindingID: fs[0].ID(), Tenant: fs[0].Tenant,
		State: audit.FindingAcknowledged, By: "ann", Time: recs[5].Call.Time}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path, pub, priv
}

// openSigned opens a new store in a temporary directory with opts and a
// new signing key; it returns the store, its file and the key pair.
func openSigned(t *testing.T, opts Options) (s *Store, path string, pub ed25519.PublicKey, priv ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "mcpaudit.db")
	opts.SigningKey = priv
	if s, err = Open(path, opts); err != nil {
		t.Fatal(err)
	}
	return s, path, pub, priv
}

// tenantRecords are the first n records of generator seed 11 from
// storetest.T0, alternately of tenants acme and globex, and the generator
// for more.
func tenantRecords(t *testing.T, n int) (*storetest.Generator, []audit.Record) {
	t.Helper()
	g, err := storetest.NewGenerator(11, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	recs := g.Records(n)
	for i := range recs {
		recs[i].Call.Tenant = []string{"acme", "globex"}[i%2]
	}
	return g, recs
}

func verify(t *testing.T, path string, pub ed25519.PublicKey) *chain.Report {
	t.Helper()
	r, err := Verify(context.Background(), path, chain.KeysOf(pub))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// edit copies the fixture and runs SQL on the copy, as someone with
// write access to the file would.
func edit(t *testing.T, path string, stmts ...string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "edited.db")
	if err := os.WriteFile(cp, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", cp)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return cp
}

func TestVerify_Untouched(t *testing.T) {
	path, pub, _ := tamperFixture(t)
	r := verify(t, path, pub)
	if !r.OK() || r.Calls != 300 || r.Findings != 6 || r.Changes != 1 || r.Checkpoints == 0 {
		var b strings.Builder
		r.Print(&b)
		t.Fatalf("an untouched store does not verify:\n%s", b.String())
	}
	for _, n := range r.Notes {
		if strings.Contains(n, "not signed") {
			t.Errorf("a closed store has an unsigned tail: %s", n)
		}
	}
}

// TestVerify_SignedBeforeFirstTick: a signed store verifies from the start.
// Open signs its first checkpoint, so that calls appended before the first
// tick are an unsigned tail (a note), not "no checkpoint is stored" (a
// finding, the sign of checkpoints deleted).
func TestVerify_SignedBeforeFirstTick(t *testing.T) {
	s, path, pub, _ := openSigned(t, Options{CheckpointEvery: time.Hour})
	defer s.Close()
	g, err := storetest.NewGenerator(12, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCalls(context.Background(), g.Records(50)); err != nil {
		t.Fatal(err)
	}
	r := verify(t, path, pub)
	var b strings.Builder
	r.Print(&b)
	if !r.OK() || r.Checkpoints != 1 || !strings.Contains(b.String(), "not signed yet") {
		t.Fatalf("a signed store before its first tick: want ok, 1 checkpoint and an unsigned tail:\n%s", b.String())
	}
}

// TestVerify_Tampered: each edit of the file is reported, with where.
func TestVerify_Tampered(t *testing.T) {
	path, pub, _ := tamperFixture(t)
	f := func(name string, want []string, stmts ...string) {
		t.Helper()
		r := verify(t, edit(t, path, stmts...), pub)
		var b strings.Builder
		r.Print(&b)
		out := b.String()
		if r.OK() {
			t.Errorf("%s: not detected:\n%s", name, out)
			return
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: report does not say %q:\n%s", name, w, out)
			}
		}
	}
	// Rows 1-100 are the first commit: acme has the odd rows, globex the
	// even ones, each in its own entry.
	f("a changed byte", []string{`tenant "globex": chain entry 1 (calls rows 2 to 100`, "contents differ"},
		`UPDATE calls SET rec = unhex(substr(hex(rec), 1, 80) || CASE WHEN substr(hex(rec), 82, 1) = '0' THEN substr(hex(rec), 81, 1) || '1'
			ELSE substr(hex(rec), 81, 1) || '0' END || substr(hex(rec), 83)) WHERE rid = 58`)
	f("a deleted row", []string{`tenant "acme": chain entry 2 (calls rows 101 to 199`, "50 rows recorded, 49 found", "row [157] gone"},
		`DELETE FROM calls WHERE rid = 157`)
	f("a swapped pair", []string{`tenant "acme": chain entry 1 (calls rows 1 to 99`, "rows swapped"},
		`CREATE TEMP TABLE sw AS SELECT rid, time, rec FROM calls WHERE rid IN (5, 7)`,
		`UPDATE calls SET time = (SELECT time FROM sw WHERE rid = 7), rec = (SELECT rec FROM sw WHERE rid = 7) WHERE rid = 5`,
		`UPDATE calls SET time = (SELECT time FROM sw WHERE rid = 5), rec = (SELECT rec FROM sw WHERE rid = 5) WHERE rid = 7`)
	f("a call inserted", []string{`call row 301`, "in no chain entry"},
		`INSERT INTO calls (rid, id, tenant, time, rec) SELECT 301, x'00112233445566778899', tenant, time, rec FROM calls WHERE rid = 9`)
	f("a call moved to another tenant", []string{"in no chain entry", "rows deleted"},
		`UPDATE calls SET tenant = (SELECT tenant FROM calls WHERE rid = 2) WHERE rid = 1`)
	f("a finding deleted", []string{"findings", "6 rows recorded", "rows deleted"},
		`DELETE FROM findings WHERE id IN (SELECT id FROM findings LIMIT 1)`)
	f("a finding edited", []string{"findings", "contents differ"},
		`UPDATE findings SET severity = 1`)
	f("a state change deleted", []string{"changes row 1,", "1 row recorded, 0 found"},
		`DELETE FROM finding_changes`)
	f("checkpoints deleted", []string{"none is stored"}, `DELETE FROM checkpoints`)
	f("a checkpoint forged", []string{"checkpoint 2", "signature does not verify"},
		`UPDATE checkpoints SET body = CAST(replace(CAST(body AS TEXT), '"globex"', '"globey"') AS BLOB) WHERE seq = 2`)
}

// TestVerify_Rewritten: someone edits a call and recomputes the whole
// chain after it, so that the chain agrees with itself; the signed
// checkpoint made before does not.
func TestVerify_Rewritten(t *testing.T) {
	path, pub, _ := tamperFixture(t)
	cp := edit(t, path, `UPDATE calls SET rec = (SELECT rec FROM calls WHERE rid = 3) WHERE rid = 1`)
	// Recompute acme's chain from its first entry, as an attacker without
	// the key can.
	db, err := sql.Open("sqlite", cp)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(`SELECT rid, id, time, rec FROM calls WHERE rid BETWEEN 1 AND 99 AND rid % 2 = 1 ORDER BY rid`)
	if err != nil {
		t.Fatal(err)
	}
	var hs []chain.Hash
	for rows.Next() {
		var rid, tm int64
		var id any
		var rec []byte
		rows.Scan(&rid, &id, &tm, &rec)
		hs = append(hs, callHash(rid, id, "acme", tm, rec))
	}
	rows.Close()
	var prev chain.Hash
	var es []chain.Entry
	qr, _ := tx.Query(`SELECT seq, kind, first, last, n, digest, time FROM chain WHERE tenant = 'acme' ORDER BY seq`)
	for qr.Next() {
		e := chain.Entry{Tenant: "acme"}
		var d []byte
		var tm int64
		qr.Scan(&e.Seq, &e.Kind, &e.First, &e.Last, &e.N, &d, &tm)
		copy(e.Digest[:], d)
		e.Time = time.Unix(0, tm)
		es = append(es, e)
	}
	qr.Close()
	for _, e := range es {
		if e.Seq == 1 {
			e.Digest = chain.Digest(hs)
		}
		e.Prev = prev
		h := e.Hash()
		if _, err := tx.ExecContext(ctx, `UPDATE chain SET digest = ?, prev = ?, hash = ? WHERE tenant = 'acme' AND seq = ?`, e.Digest[:], e.Prev[:], h[:], e.Seq); err != nil {
			t.Fatal(err)
		}
		prev = h
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// Without the public key the rewrite passes: the chain agrees with itself.
	if r := verify(t, cp, nil); !r.OK() {
		t.Fatalf("the rewritten chain does not agree with itself: %v", r.Problems)
	}
	r := verify(t, cp, pub)
	var b strings.Builder
	r.Print(&b)
	if r.OK() || !strings.Contains(b.String(), "with another hash: the history up to it was rewritten") {
		t.Fatalf("a rewritten chain was not caught by the signed checkpoint:\n%s", b.String())
	}
}

// TestVerify_Retention: retention cuts the chains and signs the cut; the
// store still verifies, and a cut nobody signed does not.
func TestVerify_Retention(t *testing.T) {
	path, pub, priv := tamperFixture(t)
	s, err := Open(path, Options{SigningKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	// The generator's calls span a few minutes: cut in the middle.
	var times []time.Time
	s.ScanCalls(context.Background(), time.Time{}, func(r *audit.Record) error {
		times = append(times, r.Call.Time)
		return nil
	})
	cutoff := times[len(times)/2]
	n, err := s.DeleteBefore(context.Background(), cutoff)
	if err != nil || n == 0 {
		t.Fatalf("DeleteBefore = %d, %v", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := verify(t, path, pub)
	var b strings.Builder
	r.Print(&b)
	if !r.OK() {
		t.Fatalf("a store after retention does not verify:\n%s", b.String())
	}
	db, _ := sql.Open("sqlite", path)
	var cuts int
	db.QueryRow(`SELECT count(*) FROM chain_cuts`).Scan(&cuts)
	db.Close()
	if cuts == 0 {
		t.Fatalf("retention of %d rows cut no chain", n)
	}
	// The checkpoint that signed the cut deleted: the cut is then one made
	// after the last checkpoint, as a serve without its key makes them
	// (review rev17c), which cannot be told from a removal: a note (the
	// limit of any tail after the last checkpoint).
	r = verify(t, edit(t, path, `DELETE FROM checkpoints WHERE seq = (SELECT max(seq) FROM checkpoints)`), pub)
	b.Reset()
	r.Print(&b)
	if !r.OK() || !strings.Contains(b.String(), "cannot be told from a removal") {
		t.Fatalf("a cut after the last checkpoint: want a note:\n%s", b.String())
	}
	// And its cut entries deleted too: no sign of retention is left.
	r = verify(t, edit(t, path, `DELETE FROM checkpoints WHERE seq = (SELECT max(seq) FROM checkpoints)`,
		`DELETE FROM chain WHERE kind = 'cut'`), pub)
	b.Reset()
	r.Print(&b)
	if r.OK() || !strings.Contains(b.String(), "no checkpoint signed it") {
		t.Fatalf("an unsigned cut was not reported:\n%s", b.String())
	}
}
