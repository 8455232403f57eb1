package clickhouse

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
)

// forgeCut removes acme's first chain entry and its calls, as someone who
// can write the tables (no key), and records the removal as a retention
// cut in chain_cuts; with entry, also the cut's cut entry after the head
// (chain.CutDigest, as retention writes it).
func forgeCut(t *testing.T, o Options, withEntry bool) {
	t.Helper()
	forgeCutOf(t, o, withEntry, true)
}

// forgeCutOf is forgeCut; with deleteEntry false, acme's first chain entry
// is left in the chain table (only its calls are deleted), as retention
// leaves a cut entry until its delete is done.
func forgeCutOf(t *testing.T, o Options, withEntry, deleteEntry bool) {
	t.Helper()
	conn := rawConn(t, o.DSN)
	db, ctx := o.Database, context.Background()
	var nonce, head uint64
	var prev2, headHash string
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
	if deleteEntry {
		mutate(t, conn, db, "ALTER TABLE "+db+".chain DELETE WHERE tenant = 'acme' AND seq = 1")
	}
	before := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC) // older than every call removed
	if withEntry {
		r := chainRow{Tenant: "acme", Replica: o.Replica, Seq: head + 1, Kind: chain.KindCut, Nonce: 2, Prev: chain.Hash([]byte(headHash)),
			Time: time.Now(), Sums: []sum{}, Times: []uint32{}, Digest: chain.CutDigest(2, []byte(prev2), before.Unix())}
		e := r.entry()
		r.Hash = e.Hash()
		b, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".chain ("+strings.Join(chainColumns, ", ")+")")
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range chainColumnValues([]chainRow{r}) {
			if err := b.Column(i).Append(c); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Send(); err != nil {
			t.Fatal(err)
		}
	}
	cb, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".chain_cuts (tenant, replica, seq, prev, before, version)")
	if err != nil {
		t.Fatal(err)
	}
	if err := cb.Append("acme", o.Replica, uint64(2), prev2, before, uint64(time.Now().UnixNano())); err != nil {
		t.Fatal(err)
	}
	if err := cb.Send(); err != nil {
		t.Fatal(err)
	}
}

// TestRev20c_ForgedCutSignedByRunningServe (review rev20c, D1): a keyed
// serve's checkpoints sign every cut they find in chain_cuts, not the cuts
// it made. Someone who can write the tables, while serve runs with its key
// all along, removes acme's first entry and its calls and writes a cut
// row; serve's next checkpoint (checkpoint_every, here signNow as its
// ticker calls it) signs the forged cut, and verify passes it: without a
// cut entry by default, with one under --key-always, which docs/storage.md
// says reports such a cut as a removal ("a keyed serve signs each cut at
// once").
func TestRev20c_ForgedCutSignedByRunningServe(t *testing.T) {
	for _, withEntry := range []bool{false, true} {
		t.Run(fmt.Sprintf("cut entry %v", withEntry), func(t *testing.T) {
			o, pub, _ := chainedStore(t, AckInsert)
			s := openStore(t, o) // serve, with its key all along
			forgeCut(t, o, withEntry)
			s.signNow(false) // the next tick of its checkpoint loop
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			r, text := strictOf(t, o, pub)
			if r.OK() {
				t.Errorf("a cut forged while a keyed serve ran passes verify --key-always:\n%s", text)
			}
		})
	}
}

// TestRev20c_UnsignedCutOfAnotherReplica (review rev20c, D2): verify
// accepted a row missing when it was older than the latest cutoff of any
// replica's cut of its tenant, signed or not. Someone who can write the
// tables deletes every call of acme, all of them in signed entries of
// replica "", and records a cut of a replica "zzz" that never ran (a chain
// of one cut entry, cutoff now); verify said only the note of an unsigned
// cut (exit 0). A cut entry that begins its chain (a chain that held
// nothing to cut) is reported itself (cut21). A made-up chain that starts
// at its cut entry, as an honest chain whose every entry was cut does,
// still excuses the deleted calls: an unsigned cut excuses every chain of
// its tenant, since excusing its own chain only made honest keyless
// replicas TAMPERED (review rev21c); that case is skipped unless
// MCPAUDIT_REV20C_DEFECTS=1.
func TestRev20c_UnsignedCutOfAnotherReplica(t *testing.T) {
	t.Run("cut entry first", func(t *testing.T) {
		o, pub, conn := chainedStore(t, AckInsert)
		mutate(t, conn, o.Database, "ALTER TABLE "+o.Database+".calls DELETE WHERE tenant = 'acme'")
		var zero chain.Hash
		madeUpCut(t, o, conn, 1, zero)
		rep, text := verifyOf(t, o, pub)
		if rep.OK() {
			t.Fatalf("every call of acme's signed entries deleted, under a made-up replica's unsigned cut, passes verify:\n%s", text)
		}
		for _, want := range []string{`of replica "zzz"`, "its cut entry is the first entry of its chain"} {
			if !strings.Contains(text, "TAMPERED") || !strings.Contains(text, want) {
				t.Errorf("the report does not say %q:\n%s", want, text)
			}
		}
	})
	t.Run("chain starting after its cut", func(t *testing.T) {
		if os.Getenv("MCPAUDIT_REV20C_DEFECTS") == "" {
			t.Skip("rev20c's D2 left open (lead, stop 41): an unsigned cut excuses every chain of its tenant again, since excusing its own chain only made honest keyless replicas TAMPERED (review rev21c); verify --key-always reports it; set MCPAUDIT_REV20C_DEFECTS=1 to run")
		}
		// The made-up chain starts at entry 2, its cut entry, as an honest
		// chain whose every entry was cut does: only the rows' own cuts
		// excuse them.
		o, pub, conn := chainedStore(t, AckInsert)
		mutate(t, conn, o.Database, "ALTER TABLE "+o.Database+".calls DELETE WHERE tenant = 'acme'")
		madeUpCut(t, o, conn, 2, chain.Hash{1})
		rep, text := verifyOf(t, o, pub)
		if rep.OK() || !strings.Contains(text, "gone: deleted: calls") {
			t.Errorf("acme's signed calls deleted under a made-up replica's unsigned cut are not reported:\n%s", text)
		}
		if len(rep.UnsignedCuts) != 1 {
			t.Errorf("%d unsigned cuts, want the made-up one as a note (it cannot be told from a keyless replica's):\n%s", len(rep.UnsignedCuts), text)
		}
	})
}

// madeUpCut records, as someone who can write the tables, a cut of acme
// by replica "zzz" (which never ran) before entry seq, whose prev is prev,
// at cutoff now, with its cut entry as entry seq of zzz's chain.
func madeUpCut(t *testing.T, o Options, conn driver.Conn, seq uint64, prev chain.Hash) {
	t.Helper()
	db, ctx := o.Database, context.Background()
	before := time.Now().Truncate(time.Second)
	r := chainRow{Tenant: "acme", Replica: "zzz", Seq: seq, Kind: chain.KindCut, Nonce: seq, Prev: prev, Time: time.Now(),
		Sums: []sum{}, Times: []uint32{}, Digest: chain.CutDigest(int64(seq), prev[:], before.Unix())}
	e := r.entry()
	r.Hash = e.Hash()
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".chain ("+strings.Join(chainColumns, ", ")+")")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range chainColumnValues([]chainRow{r}) {
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
	if err := cb.Append("acme", "zzz", seq, string(prev[:]), before, uint64(1)); err != nil {
		t.Fatal(err)
	}
	if err := cb.Send(); err != nil {
		t.Fatal(err)
	}
}

// TestRev20c_TwoReplicasCut (review rev20c, held): two keyed replicas
// write acme; replica "" cuts and deletes (the fallback's deletes take
// every replica's rows of the tenant), then replica "b". The history
// verifies clean under --key-always after each pass.
func TestRev20c_TwoReplicasCut(t *testing.T) {
	o, pub, _ := chainedStore(t, AckInsert)
	ob := o
	ob.Replica = "b"
	b := openStore(t, ob)
	var more []*audit.Call
	for _, c := range exampleCalls(t)[:5] {
		cp := *c
		cp.Tenant, cp.ID = "acme", c.ID+"-b"
		more = append(more, &cp)
	}
	ingest(t, b, more)
	if r, text := strictOf(t, o, pub); !r.OK() {
		t.Fatalf("before retention:\n%s", text)
	}
	o.Retention.Tenants = map[string]time.Duration{"acme": 24 * time.Hour}
	a := openStore(t, o)
	if err := a.enforceRetention(context.Background(), retentionNow); err != nil {
		t.Fatal(err)
	}
	if r, text := strictOf(t, o, pub); !r.OK() {
		t.Errorf("after replica \"\" cut, before replica \"b\" did:\n%s", text)
	}
	ob.Retention.Tenants = o.Retention.Tenants
	b.Close()
	b = openStore(t, ob)
	if err := b.enforceRetention(context.Background(), retentionNow); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b.Close()
	conn := rawConn(t, o.DSN)
	if n := count(t, conn, "SELECT uniqExact(replica) FROM "+o.Database+".chain_cuts WHERE tenant = 'acme'"); n != 2 {
		t.Fatalf("%d replicas cut acme, want 2: the test shows nothing", n)
	}
	if n := count(t, conn, "SELECT count() FROM "+o.Database+".calls WHERE tenant = 'acme'"); n != 0 {
		t.Fatalf("%d calls of acme left, want none", n)
	}
	if r, text := strictOf(t, o, pub); !r.OK() {
		t.Errorf("after both replicas cut:\n%s", text)
	}
}

// TestCut21_KeylessReplicasCut: TestRev20c_TwoReplicasCut with both
// replicas keyed before and run without their key for retention. Replica
// "" cuts and deletes (the fallback's deletes take replica "b"'s old rows of
// acme too); its unsigned cut excuses them, so the honest history is clean
// between the passes too (cut21 reported b's rows deleted there, review
// rev21c's false alarm; an unsigned cut excuses every chain of its tenant
// again); after "b" cut its chain too it is clean with two notes.
func TestCut21_KeylessReplicasCut(t *testing.T) {
	o, pub, _ := chainedStore(t, AckInsert)
	ob := o
	ob.Replica = "b"
	b := openStore(t, ob)
	var more []*audit.Call
	for _, c := range exampleCalls(t)[:5] {
		cp := *c
		cp.Tenant, cp.ID = "acme", c.ID+"-b"
		more = append(more, &cp)
	}
	ingest(t, b, more)
	b.Close()
	if r, text := strictOf(t, o, pub); !r.OK() {
		t.Fatalf("before retention:\n%s", text)
	}
	o.SigningKey, ob.SigningKey = nil, nil
	o.Retention.Tenants = map[string]time.Duration{"acme": 24 * time.Hour}
	ob.Retention.Tenants = o.Retention.Tenants
	a := openStore(t, o)
	if err := a.enforceRetention(context.Background(), retentionNow); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if r, text := verifyOf(t, o, pub); !r.OK() {
		t.Errorf("between the passes, replica b's rows deleted by replica \"\"'s honest unsigned cut are reported:\n%s", text)
	}
	b = openStore(t, ob)
	if err := b.enforceRetention(context.Background(), retentionNow); err != nil {
		t.Fatal(err)
	}
	b.Close()
	conn := rawConn(t, o.DSN)
	if n := count(t, conn, "SELECT uniqExact(replica) FROM "+o.Database+".chain_cuts WHERE tenant = 'acme'"); n != 2 {
		t.Fatalf("%d replicas cut acme, want 2: the test shows nothing", n)
	}
	r, text := verifyOf(t, o, pub)
	if !r.OK() || len(r.UnsignedCuts) != 2 {
		t.Errorf("after both replicas cut without their key: OK %v, %d unsigned cuts, want clean with 2 notes:\n%s", r.OK(), len(r.UnsignedCuts), text)
	}
}
