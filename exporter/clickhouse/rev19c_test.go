package clickhouse

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
)

// retentionNow is a "now" a week after the examples (2026-11-02): a
// retention of one day for acme then removes every call of acme.
var retentionNow = time.Date(2026, 11, 9, 0, 0, 0, 0, time.UTC)

// keylessCut fills a store with its key (chainedStore), then runs
// retention over acme without the key, as serve started without
// signing_key_file does, and stores more calls of acme after the cut. It
// returns the options (without the key), the key pair and a raw
// connection.
func keylessCut(t *testing.T) (Options, ed25519.PublicKey, ed25519.PrivateKey, driver.Conn) {
	t.Helper()
	o, pub, conn := chainedStore(t, AckInsert)
	priv := o.SigningKey
	o.SigningKey = nil // serve started without its key
	o.Retention.Tenants = map[string]time.Duration{"acme": 24 * time.Hour}
	s := openStore(t, o)
	if err := s.enforceRetention(context.Background(), retentionNow); err != nil {
		t.Fatalf("enforceRetention: %v", err)
	}
	var more []*audit.Call
	for _, c := range exampleCalls(t)[:5] {
		cp := *c
		cp.Tenant, cp.ID, cp.Time = "acme", c.ID+"-after-cut", retentionNow.Add(-time.Hour)
		more = append(more, &cp)
	}
	ingest(t, s, more)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count() FROM "+o.Database+".chain_cuts WHERE tenant = 'acme'"); n == 0 {
		t.Fatal("retention made no cut: the test shows nothing")
	}
	return o, pub, priv, conn
}

// TestRev19c_KeylessCut (review rev19c, D1, fixed by ch20): retention run
// while serve has no signing key cuts the chains and signs nothing. Until
// ch20 verify with the public key reported the cut "no checkpoint signed
// it: history was removed outside retention" (TAMPERED, exit 1) for an
// honest history; the cut's cut entry now stands after every signed head,
// and verify says the cut is unsigned in a note, and TAMPERED only under
// --key-always (Strict).
func TestRev19c_KeylessCut(t *testing.T) {
	o, pub, _, _ := keylessCut(t)
	r, text := verifyOf(t, o, pub)
	if !r.OK() {
		t.Fatalf("an honest keyless retention cut is reported as tampering:\n%s", text)
	}
	if len(r.UnsignedCuts) != 1 || !strings.Contains(text, `tenant "acme": the cut before entry`) || !strings.Contains(text, "cannot be told from a removal") {
		t.Errorf("the keyless cut is not said to be unsigned, in a note:\n%s", text)
	}
	r.Strict()
	if r.OK() || !strings.Contains(fmt.Sprint(r.Problems), "--key-always") {
		t.Errorf("--key-always: problems %v, want the unsigned cut as a removal", r.Problems)
	}
}

// TestVerify_KeylessCut: what verify makes of a keyless cut's record
// edited, and of a start with the key after it (review rev19c's D1, the
// cases of the embedded store's TestVerify_KeylessCut).
func TestVerify_KeylessCut(t *testing.T) {
	t.Run("cut entry deleted", func(t *testing.T) {
		o, pub, _, conn := keylessCut(t)
		mutate(t, conn, o.Database, "ALTER TABLE "+o.Database+".chain DELETE WHERE kind = 'cut'")
		r, text := verifyOf(t, o, pub)
		if r.OK() || !strings.Contains(text, `TAMPERED: tenant "acme": the cut before entry`) || !strings.Contains(text, "no cut entry of the chain records it") {
			t.Errorf("a cut whose cut entry was deleted is not a removal:\n%s", text)
		}
	})
	t.Run("cut edited", func(t *testing.T) {
		o, pub, _, conn := keylessCut(t)
		// The cutoff moved a day later, under a newer version: no cut
		// entry records that cut.
		q := "INSERT INTO " + o.Database + ".chain_cuts (tenant, replica, seq, prev, before, version) SELECT tenant, replica, argMax(seq, version), argMax(prev, version), argMax(before, version) + 86400, max(version) + 1 FROM " +
			o.Database + ".chain_cuts WHERE tenant = 'acme' GROUP BY tenant, replica"
		if err := conn.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
		r, text := verifyOf(t, o, pub)
		if r.OK() || !strings.Contains(text, "no cut entry of the chain records it") {
			t.Errorf("a cut edited after its cut entry is not a removal:\n%s", text)
		}
	})
	t.Run("later checkpoint without the cut", func(t *testing.T) {
		o, pub, priv, conn := keylessCut(t)
		// A checkpoint signing every head, past the cut entry, and no cut:
		// what a keyed serve that lost its cuts would sign (signed here with
		// the key).
		ctx := context.Background()
		body := chain.Body{Time: time.Now()}
		err := each(ctx, conn, "read the heads", "SELECT tenant, max(seq), argMax(hash, seq) FROM "+o.Database+".chain GROUP BY tenant", func(r driver.Rows) error {
			var h chain.Head
			var seq uint64
			var hash string
			if err := r.Scan(&h.Tenant, &seq, &hash); err != nil {
				return err
			}
			h.Seq, h.Hash = int64(seq), chain.Hash([]byte(hash)).String()
			body.Heads = append(body.Heads, h)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		last := count(t, conn, "SELECT max(seq) FROM "+o.Database+".checkpoints")
		cp := chain.Sign(int64(last+1), body, priv)
		b, err := conn.PrepareBatch(ctx, "INSERT INTO "+o.Database+".checkpoints (replica, seq, time, body, sig)")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Append("", uint64(cp.Seq), body.Time, string(cp.Body), string(cp.Sig)); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(); err != nil {
			t.Fatal(err)
		}
		r, text := verifyOf(t, o, pub)
		if r.OK() || !strings.Contains(text, "though a checkpoint signed entry") {
			t.Errorf("a checkpoint made after the cut that left it out is not a removal:\n%s", text)
		}
	})
	t.Run("signed at the next start with the key", func(t *testing.T) {
		o, pub, priv, _ := keylessCut(t)
		o.SigningKey = priv
		s := openStore(t, o)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		r, text := verifyOf(t, o, pub)
		if r.Strict(); !r.OK() || strings.Contains(text, "cannot be told") || strings.Contains(text, "not signed yet") {
			t.Errorf("after a start with the key, the cut or the tail is still unsigned:\n%s", text)
		}
	})
}

// TestVerify_ForgedCutKeyAlways (review rev19c's D4, in the ClickHouse
// store): someone who can write the tables removes acme's first chain
// entry and its calls and records it as a retention cut, with its cut
// entry after the last checkpoint. By default verify says only the note
// of an unsigned cut (the tables cannot tell it from a keyless serve's);
// with --key-always (Strict) it is TAMPERED. An honest keyed store stays
// clean under Strict.
func TestVerify_ForgedCutKeyAlways(t *testing.T) {
	o, pub, conn := chainedStore(t, AckInsert)
	db := o.Database
	honest, text := verifyOf(t, o, pub)
	if honest.Strict(); !honest.OK() {
		t.Fatalf("an honest store is not clean under --key-always:\n%s", text)
	}
	ctx := context.Background()
	var nonce uint64
	var prev2, headHash string
	var head uint64
	if err := conn.QueryRow(ctx, "SELECT nonce FROM "+db+".chain WHERE tenant = 'acme' AND seq = 1").Scan(&nonce); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT prev FROM "+db+".chain WHERE tenant = 'acme' AND seq = 2").Scan(&prev2); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT max(seq), argMax(hash, seq) FROM "+db+".chain WHERE tenant = 'acme'").Scan(&head, &headHash); err != nil {
		t.Fatal(err)
	}
	mutate(t, conn, db, fmt.Sprintf("ALTER TABLE %s.calls DELETE WHERE tenant = 'acme' AND chain_entry = %d", db, nonce))
	mutate(t, conn, db, "ALTER TABLE "+db+".chain DELETE WHERE tenant = 'acme' AND seq = 1")
	before := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC) // older than every call removed
	cutRow := chainRow{Tenant: "acme", Seq: head + 1, Kind: chain.KindCut, Nonce: 2, Prev: chain.Hash([]byte(headHash)),
		Time: time.Now(), Sums: []sum{}, Times: []uint32{}, Digest: chain.CutDigest(2, []byte(prev2), before.Unix())}
	e := cutRow.entry()
	cutRow.Hash = e.Hash()
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".chain ("+strings.Join(chainColumns, ", ")+")")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range chainColumnValues([]chainRow{cutRow}) {
		if err := b.Column(i).Append(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	cb, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".chain_cuts (tenant, replica, seq, prev, before, version)")
	if err != nil {
		t.Fatal(err)
	}
	if err := cb.Append("acme", "", uint64(2), prev2, before, uint64(time.Now().UnixNano())); err != nil {
		t.Fatal(err)
	}
	if err := cb.Send(); err != nil {
		t.Fatal(err)
	}
	r, text := verifyOf(t, o, pub)
	if !r.OK() || len(r.UnsignedCuts) != 1 {
		t.Fatalf("by default: want the forged cut as the note of an unsigned cut, no problem:\n%s", text)
	}
	r.Strict()
	if r.OK() || !strings.Contains(fmt.Sprint(r.Problems), "--key-always") {
		t.Errorf("--key-always: problems %v, want the forged cut as a removal", r.Problems)
	}
}

// TestUpgrade_CutsWithoutCutEntry: a database a release before ch20 cut
// has chain_cuts rows, signed, and no cut entry. It verifies clean under
// this release (no schema change: a cut entry is a chain row of kind
// "cut"), and a keyless cut this release makes on it afterwards is the
// note of an unsigned cut, signed at the next start with the key. The
// earlier release's cut is made here by SQL, as its cutChains did (the
// cut recorded, signed by a checkpoint of the heads and cuts, then the
// chain rows and the calls before it deleted): this package cannot run
// that release's code.
func TestUpgrade_CutsWithoutCutEntry(t *testing.T) {
	o, pub, conn := chainedStore(t, AckInsert)
	db, priv := o.Database, o.SigningKey
	ctx := context.Background()
	before := retentionNow.Add(-24 * time.Hour)
	// The chain starts at the first entry holding a row at or after the
	// cutoff (the finding change's, made now).
	var start uint64
	var startPrev string
	q := fmt.Sprintf("SELECT seq, prev FROM %s.chain WHERE tenant = 'acme' AND arrayReduce('max', times) >= %d ORDER BY seq LIMIT 1", db, before.Unix())
	if err := conn.QueryRow(ctx, q).Scan(&start, &startPrev); err != nil {
		t.Fatal(err)
	}
	cb, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".chain_cuts (tenant, replica, seq, prev, before, version)")
	if err != nil {
		t.Fatal(err)
	}
	if err := cb.Append("acme", "", start, startPrev, before, uint64(time.Now().UnixNano())); err != nil {
		t.Fatal(err)
	}
	if err := cb.Send(); err != nil {
		t.Fatal(err)
	}
	body := chain.Body{Time: time.Now(), Cuts: []chain.Cut{{Tenant: "acme", Seq: int64(start), Prev: chain.Hash([]byte(startPrev)).String(), Before: before}}}
	err = each(ctx, conn, "read the heads", "SELECT tenant, max(seq), argMax(hash, seq) FROM "+db+".chain GROUP BY tenant", func(r driver.Rows) error {
		var h chain.Head
		var seq uint64
		var hash string
		if err := r.Scan(&h.Tenant, &seq, &hash); err != nil {
			return err
		}
		h.Seq, h.Hash = int64(seq), chain.Hash([]byte(hash)).String()
		body.Heads = append(body.Heads, h)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cp := chain.Sign(int64(count(t, conn, "SELECT max(seq) FROM "+db+".checkpoints")+1), body, priv)
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".checkpoints (replica, seq, time, body, sig)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append("", uint64(cp.Seq), body.Time, string(cp.Body), string(cp.Sig)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	mutate(t, conn, db, fmt.Sprintf("ALTER TABLE %s.chain DELETE WHERE tenant = 'acme' AND seq < %d", db, start))
	mutate(t, conn, db, "ALTER TABLE "+db+".calls DELETE WHERE tenant = 'acme' AND "+timeBefore(before))
	if r, text := strictOf(t, o, pub); !r.OK() || strings.Contains(text, "cut before") {
		t.Fatalf("a signed cut of the earlier release, before the upgrade:\n%s", text)
	}

	// This release, started on it without its key: retention cuts globex
	// too, and writes cut entries.
	o.SigningKey = nil
	o.Retention.Tenants = map[string]time.Duration{"acme": 24 * time.Hour, "globex": 24 * time.Hour}
	s := openStore(t, o)
	if err := s.enforceRetention(ctx, retentionNow); err != nil {
		t.Fatalf("enforceRetention: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// acme's cut is the one the earlier release signed (the same start and
	// cutoff); globex's is new and unsigned.
	r, text := verifyOf(t, o, pub)
	if !r.OK() || len(r.UnsignedCuts) != 1 || r.UnsignedCuts[0].Tenant != "globex" {
		t.Fatalf("keyless cuts after the upgrade: want ok and globex's cut noted as unsigned:\n%s", text)
	}
	o.SigningKey = priv
	s = openStore(t, o)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// No note but the one verify gives each key (op23a: the checkpoints
	// it signed).
	r, text = strictOf(t, o, pub)
	notes := slices.DeleteFunc(slices.Clone(r.Notes), func(n string) bool { return strings.HasPrefix(n, "key ed25519:") })
	if !r.OK() || len(notes) > 0 || len(r.Notes) != 1 {
		t.Fatalf("after a start with the key: want clean, no note but the key's:\n%s", text)
	}
}

// strictOf runs Verify as verifyOf does, under --key-always (Strict).
func strictOf(t *testing.T, o Options, pub ed25519.PublicKey) (*chain.Report, string) {
	t.Helper()
	r, text := verifyOf(t, o, pub)
	r.Strict()
	return r, text
}

// TestCut_PerPass: the commit path writes no cut entry (a store filled by
// three batches and a finding change holds none); a retention pass writes
// one per tenant it cuts; later passes over a tenant whose rows all went
// write none (no cut entry, no chain_cuts row), and the history verifies.
func TestCut_PerPass(t *testing.T) {
	o, pub, conn := chainedStore(t, AckInsert)
	db := o.Database
	if n := count(t, conn, "SELECT count() FROM "+db+".chain WHERE kind = 'cut'"); n != 0 {
		t.Fatalf("%d cut entries after the commit path alone, want 0", n)
	}
	idle := "acme" // the tenant without the finding change, dated now
	if findingTenant == "acme" {
		idle = "globex"
	}
	o.Retention.Tenants = map[string]time.Duration{idle: 24 * time.Hour}
	s := openStore(t, o)
	for i := range 3 {
		if err := s.enforceRetention(context.Background(), retentionNow.Add(time.Duration(i)*time.Hour)); err != nil {
			t.Fatalf("enforceRetention: %v", err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".calls WHERE tenant = "+quote(idle)); n != 0 {
		t.Fatalf("retention left %d calls of %s", n, idle)
	}
	cuts := count(t, conn, "SELECT count() FROM "+db+".chain WHERE kind = 'cut' AND tenant = "+quote(idle))
	rows := count(t, conn, "SELECT count() FROM "+db+".chain_cuts WHERE tenant = "+quote(idle))
	others := count(t, conn, "SELECT count() FROM "+db+".chain WHERE kind = 'cut' AND tenant <> "+quote(idle))
	if cuts != 1 || rows != 1 || others != 0 {
		t.Errorf("three passes: %d cut entries and %d chain_cuts rows of %s, %d cut entries of the tenant kept for ever; want 1, 1, 0", cuts, rows, idle, others)
	}
	if r, text := strictOf(t, o, pub); !r.OK() {
		t.Errorf("after three passes:\n%s", text)
	}
}

// TestRetention_FindingChanges (review rev19c's D2, in the ClickHouse
// store): finding changes go by their own time, as calls and findings go
// by theirs. Until ch20 they were never deleted: the cut passed their
// entries, and the rows stayed for good, unchecked. Retention past the
// change's time deletes it (the fallback of 18.16: a mutation, the table
// having no day partitions), verify finds the history honest, and a
// change of the kept history deleted is still reported
// (TestVerify_Tampered).
func TestRetention_FindingChanges(t *testing.T) {
	o, pub, conn := chainedStore(t, AckInsert)
	db := o.Database
	if n := count(t, conn, "SELECT count() FROM "+db+".finding_changes"); n != 1 {
		t.Fatalf("%d finding changes stored, want 1", n)
	}
	// The change is dated now: two days on, with one day kept, it goes
	// with every call and finding (dated 2026-11-02) of the tenants.
	o.Retention.Default = 24 * time.Hour
	s := openStore(t, o)
	if err := s.enforceRetention(context.Background(), time.Now().Add(48*time.Hour)); err != nil {
		t.Fatalf("enforceRetention: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".finding_changes"); n != 0 {
		t.Errorf("%d finding changes left past their retention", n)
	}
	if n := count(t, conn, "SELECT count() FROM "+db+".chain WHERE kind = 'changes'"); n != 0 {
		t.Errorf("%d changes entries left: the cut did not pass them", n)
	}
	if r, text := strictOf(t, o, pub); !r.OK() {
		t.Errorf("after retention took the finding change:\n%s", text)
	}
}

// TestVerify_ForgedCutBeforeNewerRows (review rev19c, D4 narrowed): the
// forged cut of forgeCut, with acme's first chain entry left in the chain
// table. That entry lists the times of its rows, newer than the cutoff
// the cut claims; retention cuts only before the first entry holding a row
// not older than its cutoff, so the cut is not retention's: TAMPERED, not
// the note of an unsigned cut.
func TestVerify_ForgedCutBeforeNewerRows(t *testing.T) {
	o, pub, _ := chainedStore(t, AckInsert)
	forgeCutOf(t, o, true, false)
	r, text := verifyOf(t, o, pub)
	if r.OK() || !strings.Contains(text, "retention did not cut it") {
		t.Errorf("a cut before an entry of rows newer than its cutoff is not a removal:\n%s", text)
	}
}
