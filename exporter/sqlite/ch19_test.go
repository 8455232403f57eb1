package sqlite

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
)

// report runs verify and returns the report and its printed form.
func report(t *testing.T, path string, pub []byte) (*chain.Report, string) {
	t.Helper()
	r := verify(t, path, pub)
	var b strings.Builder
	r.Print(&b)
	return r, b.String()
}

// wantTampered fails unless the report of path has problems and says each
// of want.
func wantTampered(t *testing.T, name, path string, pub []byte, want ...string) {
	t.Helper()
	r, out := report(t, path, pub)
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

// wantClean fails unless path verifies, and returns the printed report.
func wantClean(t *testing.T, name, path string, pub []byte) string {
	t.Helper()
	r, out := report(t, path, pub)
	if !r.OK() {
		t.Fatalf("%s: an honest history does not verify:\n%s", name, out)
	}
	return out
}

// middleCutoff returns the time of the middle stored call of path.
func middleCutoff(t *testing.T, s *Store) time.Time {
	t.Helper()
	var times []time.Time
	if err := s.ScanCalls(context.Background(), time.Time{}, func(r *audit.Record) error {
		times = append(times, r.Call.Time)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return times[len(times)/2]
}

// TestVerify_AnswersAsideChained (ch19, review rev18l's D4): answers kept
// aside are chained. Editing one is reported; the honest paths (an answer
// completing its call, a reopen, retention deleting an answer left aside,
// a backup) still verify, and the record of an answer's move into its
// call's place is itself covered: deleting it is reported.
func TestVerify_AnswersAsideChained(t *testing.T) {
	s, path, pub, priv := openSigned(t, Options{})
	ctx := context.Background()
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	call := func(id string, answered bool) audit.Record {
		c := &audit.Call{ID: id, Time: t0, Server: "thegram", Tool: "gram_projects", Source: "calls:1", Tenant: "acme"}
		if answered {
			c.Responded, c.Result = true, []byte(`{"isError":false,"structuredContent":{"n":1}}`)
		} else {
			c.TransportError = "timeout"
		}
		return audit.Record{Call: c}
	}
	ids := []string{"c_b3000000000000000001", "c_b3000000000000000002"}
	if _, _, _, err := s.AppendCallsCompared(ctx, []audit.Record{call(ids[0], false), call(ids[1], false)}); err != nil {
		t.Fatal(err)
	}
	_, _, _, answered, err := s.AppendCallsAnswered(ctx, []audit.Record{call(ids[0], true), call(ids[1], true)})
	if err != nil || len(answered) != 2 {
		t.Fatalf("AppendCallsAnswered: answered %v, %v; want both kept aside", answered, err)
	}
	// The engine took the first answer: it moves into its call's place;
	// the second stays aside.
	if err := s.Commit(ctx, audit.Results{Answered: []audit.CallRef{{Tenant: "acme", ID: ids[0], Time: t0}}, Watermark: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantClean(t, "an answer completed, one aside", path, pub)
	wantTampered(t, "an answer aside edited", edit(t, path, `UPDATE answers_late SET rec = CAST(rec || x'00' AS BLOB)`), pub,
		"(2 answers kept aside", "contents differ")
	wantTampered(t, "an answer aside inserted", edit(t, path,
		`INSERT INTO answers_late (tenant, id, time, rec) SELECT tenant, x'00112233445566778899', time, rec FROM answers_late`), pub,
		"names chain entry 0, which holds no answers")
	wantTampered(t, "the record of the completed answer deleted", edit(t, path,
		`DELETE FROM chain_pruned WHERE typeof(row) = 'blob'`), pub, "1 record recorded, 0 found")

	// A reopen and retention of everything (the answer aside with its
	// call), then a backup: each verifies.
	s, err = Open(path, Options{SigningKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteBefore(ctx, t0.Add(time.Second)); err != nil || n != 2 {
		t.Fatalf("DeleteBefore = %d, %v; want the 2 calls", n, err)
	}
	var aside int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM answers_late`).Scan(&aside); err != nil || aside != 0 {
		t.Fatalf("%d answers aside after retention (%v), want 0", aside, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantClean(t, "after retention", path, pub)
	out := filepath.Join(t.TempDir(), "backup.db")
	if _, err := Backup(ctx, path, out); err != nil {
		t.Fatal(err)
	}
	wantClean(t, "a backup", out, pub)
}

// TestVerify_PrunedRecordForged (ch19): the records of removed rows
// (chain_pruned) are chained. On main a call deleted with a record of its
// hash written beside it passed for retention's deletion: verify was
// green. Now each record names the pruned entry that covers it.
func TestVerify_PrunedRecordForged(t *testing.T) {
	path, pub, priv := tamperFixture(t)
	s, err := Open(path, Options{SigningKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if n, err := s.DeleteBefore(ctx, middleCutoff(t, s)); err != nil || n == 0 {
		t.Fatalf("DeleteBefore = %d, %v", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantClean(t, "after retention", path, pub)

	// The record someone who can write the file makes of a call they
	// delete: its hash, under the entry that covers it.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	var rid, tm, seq int64
	var id any
	var tenant string
	var rec []byte
	if err := db.QueryRow(`SELECT rid, id, (SELECT s FROM strs WHERE strs.id = calls.tenant), time, rec FROM calls ORDER BY rid DESC LIMIT 1`).
		Scan(&rid, &id, &tenant, &tm, &rec); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT seq FROM chain WHERE tenant = ? AND kind = 'calls' AND first <= ? AND last >= ?`, tenant, rid, rid).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	var records int
	if err := db.QueryRow(`SELECT count(*) FROM chain_pruned`).Scan(&records); err != nil || records == 0 {
		t.Fatalf("retention left %d records (%v): the fixture needs an entry it emptied in part", records, err)
	}
	db.Close()
	h := callHash(rid, id, tenant, tm, rec)
	forge := fmt.Sprintf(`INSERT INTO chain_pruned (tenant, seq, row, hash) VALUES ('%s', %d, %d, x'%x')`, tenant, seq, rid, h[:])
	del := fmt.Sprintf(`DELETE FROM calls WHERE rid = %d`, rid)
	wantTampered(t, "a call deleted with a forged record", edit(t, path, del, forge), pub,
		fmt.Sprintf("the record of row %d removed from chain entry %d", rid, seq), "no pruned entry covers it")
	wantTampered(t, "a call deleted with a forged record naming a pruned entry", edit(t, path, del,
		fmt.Sprintf(`INSERT INTO chain_pruned (tenant, seq, row, hash, entry) VALUES ('%s', %d, %d, x'%x',
			(SELECT max(seq) FROM chain WHERE tenant = '%s' AND kind = 'pruned'))`, tenant, seq, rid, h[:], tenant)), pub,
		"records inserted")
	wantTampered(t, "a record deleted", edit(t, path, `DELETE FROM chain_pruned WHERE (tenant, seq, row) IN (SELECT tenant, seq, row FROM chain_pruned LIMIT 1)`), pub,
		"records of removed rows deleted")
	wantTampered(t, "a record's hash edited", edit(t, path,
		`UPDATE chain_pruned SET hash = zeroblob(32) WHERE (tenant, seq, row) IN (SELECT tenant, seq, row FROM chain_pruned LIMIT 1)`), pub,
		"a record was edited")

	// Retention again, past every call: the entries emptied in part are
	// cut with their records; their pruned entries stay until the cut
	// reaches them, and verify expects no records of them.
	s, err = Open(path, Options{SigningKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteBefore(ctx, time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantClean(t, "after retention of everything", path, pub)
}

// TestVerify_KeylessCut (ch19, review rev17c's false alarm): retention
// cuts the chains while serve runs without its signing key. On main verify
// reported the cut as history removed (TAMPERED). The cut cannot be told
// from a removal by someone who can write the file, and verify now says
// so in a note; a checkpoint made after the cut that did not sign it, or a
// cut the chain does not record, is still a removal; serve's next start
// with its key signs the cut.
func TestVerify_KeylessCut(t *testing.T) {
	path, pub, priv := tamperFixture(t)
	s, err := Open(path, Options{}) // without its key
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if n, err := s.DeleteBefore(ctx, middleCutoff(t, s)); err != nil || n == 0 {
		t.Fatalf("DeleteBefore = %d, %v", n, err)
	}
	g, _ := tenantRecords(t, 300)
	more := g.Records(20)
	for i := range more {
		more[i].Call.Tenant = []string{"acme", "globex"}[i%2]
	}
	if _, err := s.AppendCalls(ctx, more); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	out := wantClean(t, "a keyless cut", path, pub)
	if !strings.Contains(out, "cannot be told from a removal") {
		t.Errorf("a keyless cut is not said to be unsigned:\n%s", out)
	}
	wantTampered(t, "a cut the chain does not record", edit(t, path,
		`UPDATE chain_cuts SET before = before + 1 WHERE tenant = 'acme'`), pub,
		`tenant "acme": the cut before entry`, "no cut entry of the chain records it")

	// A checkpoint made after the cut that left it out (signed here with
	// the key, as a serve that lost its cuts would): a removal.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	body := chain.Body{Time: time.Now()}
	rows, err := db.Query(`SELECT tenant, seq, hash FROM chain c WHERE seq = (SELECT max(seq) FROM chain WHERE tenant = c.tenant)`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var hd chain.Head
		var hash []byte
		if err := rows.Scan(&hd.Tenant, &hd.Seq, &hash); err != nil {
			t.Fatal(err)
		}
		hd.Hash = chain.Hash(hash).String()
		body.Heads = append(body.Heads, hd)
	}
	rows.Close()
	var last int64
	if err := db.QueryRow(`SELECT max(seq) FROM checkpoints`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	db.Close()
	cp := chain.Sign(last+1, body, priv)
	wantTampered(t, "a later checkpoint without the cut", edit(t, path,
		fmt.Sprintf(`INSERT INTO checkpoints (seq, time, body, sig) VALUES (%d, 0, x'%x', x'%x')`, cp.Seq, cp.Body, cp.Sig)), pub,
		"though a checkpoint signed entry")

	// Started with its key again: its first checkpoint signs the cut.
	s, err = Open(path, Options{SigningKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if out := wantClean(t, "signed at the next start", path, pub); strings.Contains(out, "cannot be told") || strings.Contains(out, "not signed yet") {
		t.Errorf("after a start with the key, the cut and the tail are still unsigned:\n%s", out)
	}
	backup := filepath.Join(t.TempDir(), "backup.db")
	if _, err := Backup(ctx, path, backup); err != nil {
		t.Fatal(err)
	}
	wantClean(t, "a backup", backup, pub)
	// Restored: the copy opened as the store (restore copies it in).
	s, err = Open(backup, Options{SigningKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantClean(t, "a restored backup", backup, pub)
}

// TestUpgrade_ChainsRecordsAndAnswers opens a store written by main before
// ch19 (testdata/chain18.db, made at 7b3868d with the key beside it: 200
// calls of two tenants, retention that emptied entries in part, one answer
// kept aside). Before a start of this release verify says what is not
// chained yet, in notes; the start adds the columns and chains what the
// store holds, signed; deleting the answer aside is then reported.
func TestUpgrade_ChainsRecordsAndAnswers(t *testing.T) {
	path := copyFixture(t, "chain18.db")
	priv, err := chain.ReadPrivateKey(filepath.Join("testdata", "chain18-signing.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pub := priv.Public().(ed25519.PublicKey)
	out := wantClean(t, "before the upgrade", path, pub)
	for _, w := range []string{"50 records of removed rows not chained", "1 answer kept aside not chained"} {
		if !strings.Contains(out, w) {
			t.Errorf("before the upgrade: the report does not say %q:\n%s", w, out)
		}
	}
	s, err := Open(path, Options{SigningKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	var pruned, answers int
	if err := s.r.QueryRow(`SELECT (SELECT count(*) FROM chain WHERE kind = 'pruned'), (SELECT count(*) FROM chain WHERE kind = 'answers')`).
		Scan(&pruned, &answers); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if pruned == 0 || answers != 1 {
		t.Errorf("the upgrade made %d pruned entries and %d answers entries; want some, and 1", pruned, answers)
	}
	if out := wantClean(t, "after the upgrade", path, pub); strings.Contains(out, "not chained") || strings.Contains(out, "not signed yet") {
		t.Errorf("after the upgrade, something is left unchained or unsigned:\n%s", out)
	}
	wantTampered(t, "the answer aside deleted after the upgrade", edit(t, path, `DELETE FROM answers_late`), pub, "1 row recorded, 0 found")
	// A second start adopts nothing more: a record made outside the
	// collector stays reported.
	forged := edit(t, path, `INSERT INTO chain_pruned (tenant, seq, row, hash) SELECT tenant, seq, row + 100000, hash FROM chain_pruned LIMIT 1`)
	s, err = Open(forged, Options{SigningKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantTampered(t, "a record forged before a start", forged, pub, "no pruned entry covers it")
}
