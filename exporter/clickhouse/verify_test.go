package clickhouse

import (
	"context"
	"crypto/ed25519"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
)

// chainedStore fills a fresh database through the store with a signing
// key: the example captures split over two tenants, their findings, and a
// finding state change. It returns the options (for Verify), the public
// key and a raw connection; findingTenant is the tenant of the findings.
var findingTenant string

func chainedStore(t *testing.T, ack string) (Options, ed25519.PublicKey, driver.Conn) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions(t)
	o.Ack = ack
	o.SigningKey = priv
	s := openStore(t, o)
	// Tenants by server, so that each keeps the findings of its servers.
	var acme, globex []*audit.Call
	tenantOf := map[string]string{}
	for _, c := range exampleCalls(t) {
		cp := *c
		if tenantOf[c.Server] == "" {
			tenantOf[c.Server] = []string{"acme", "globex"}[len(tenantOf)%2]
		}
		cp.Tenant = tenantOf[c.Server]
		if cp.Tenant == "acme" {
			acme = append(acme, &cp)
		} else {
			globex = append(globex, &cp)
		}
	}
	half := len(globex) / 2
	var found []audit.Finding
	for _, part := range [][]*audit.Call{acme, globex[:half], globex[half:]} {
		found = append(found, ingest(t, s, part).findings...)
	}
	if len(found) == 0 {
		t.Fatal("the examples gave no findings")
	}
	f := found[0]
	findingTenant = f.Tenant
	if _, err := s.ChangeFinding(context.Background(), audit.FindingChange{FindingID: f.ID(), Tenant: f.Tenant,
		State: audit.FindingAcknowledged, By: "oncall", Note: "looking", Time: time.Now()}); err != nil {
		t.Fatalf("ChangeFinding: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	conn := rawConn(t, o.DSN)
	t.Cleanup(func() { conn.Close() })
	return o, pub, conn
}

// mutate runs an ALTER ... UPDATE or DELETE and waits until it is done.
func mutate(t *testing.T, conn driver.Conn, db, q string) {
	t.Helper()
	ctx := context.Background()
	if err := conn.Exec(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	for count(t, conn, "SELECT count() FROM system.mutations WHERE NOT is_done AND database = "+quote(db)) > 0 {
		time.Sleep(20 * time.Millisecond)
	}
}

// firstID returns one id of table for tenant, by order of id.
func firstID(t *testing.T, conn driver.Conn, db, table, tenant string, skip int) string {
	t.Helper()
	var id string
	q := "SELECT id FROM " + db + "." + table + " WHERE tenant = " + quote(tenant) + " ORDER BY id LIMIT 1 OFFSET " + strconv.Itoa(skip)
	if err := conn.QueryRow(context.Background(), q).Scan(&id); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return id
}

// timeOf returns the time of a row as verify prints it.
func timeOf(t *testing.T, conn driver.Conn, db, table, id string) string {
	t.Helper()
	var tm time.Time
	if err := conn.QueryRow(context.Background(), "SELECT time FROM "+db+"."+table+" WHERE id = "+quote(id)).Scan(&tm); err != nil {
		t.Fatal(err)
	}
	return tm.UTC().Format(time.RFC3339)
}

// verifyOf runs Verify and returns its report as text.
func verifyOf(t *testing.T, o Options, pub ed25519.PublicKey) (*chain.Report, string) {
	t.Helper()
	r, err := Verify(context.Background(), o.DSN, o.Database, chain.KeysOf(pub))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	var b strings.Builder
	r.Print(&b)
	return r, b.String()
}

func TestVerify_Untouched(t *testing.T) {
	for _, ack := range []string{AckInsert, AckLog} {
		t.Run(ack, func(t *testing.T) {
			o, pub, _ := chainedStore(t, ack)
			r, text := verifyOf(t, o, pub)
			if !r.OK() {
				t.Fatalf("an untouched store fails verification:\n%s", text)
			}
			if r.Calls == 0 || r.Findings == 0 || r.Changes != 1 || r.Checkpoints == 0 || r.Tenants != 2 {
				t.Errorf("checked too little:\n%s", text)
			}
			if strings.Contains(text, "not signed yet") {
				t.Errorf("Close left entries unsigned:\n%s", text)
			}
		})
	}
}

func TestVerify_Tampered(t *testing.T) {
	f := func(name string, tamper func(t *testing.T, conn driver.Conn, db string) (want []string)) {
		t.Run(name, func(t *testing.T) {
			o, pub, conn := chainedStore(t, AckInsert)
			want := tamper(t, conn, o.Database)
			r, text := verifyOf(t, o, pub)
			t.Logf("verify after %s:\n%s", name, text)
			if r.OK() {
				t.Fatalf("%s went unnoticed", name)
			}
			for _, w := range want {
				if !strings.Contains(text, w) {
					t.Errorf("the report does not say %q", w)
				}
			}
		})
	}
	f("a call's arguments edited", func(t *testing.T, conn driver.Conn, db string) []string {
		id := firstID(t, conn, db, "calls", "globex", 3)
		mutate(t, conn, db, "ALTER TABLE "+db+".calls UPDATE arguments = concat(arguments, ' ') WHERE id = "+quote(id))
		return []string{`tenant "globex": call ` + id, "contents differ", "edited"}
	})
	f("a call deleted", func(t *testing.T, conn driver.Conn, db string) []string {
		id := firstID(t, conn, db, "calls", "acme", 5)
		tm := timeOf(t, conn, db, "calls", id)
		mutate(t, conn, db, "ALTER TABLE "+db+".calls DELETE WHERE id = "+quote(id))
		return []string{`tenant "acme": chain entry`, "1 of its", "rows is gone: deleted: calls of time " + tm}
	})
	f("a call inserted", func(t *testing.T, conn driver.Conn, db string) []string {
		id := firstID(t, conn, db, "calls", "acme", 0)
		q := "INSERT INTO " + db + ".calls (" + callSelect + ") SELECT " + strings.Replace(callSelect, ", id, ", ", concat(id, 'x'), ", 1) +
			" FROM " + db + ".calls WHERE id = " + quote(id)
		if err := conn.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return []string{"call " + id + "x", "carries the tag of", "inserted outside the collector"}
	})
	f("two calls' contents swapped", func(t *testing.T, conn driver.Conn, db string) []string {
		a, b := firstID(t, conn, db, "calls", "acme", 1), firstID(t, conn, db, "calls", "acme", 2)
		var argA, argB string
		conn.QueryRow(context.Background(), "SELECT arguments FROM "+db+".calls WHERE id = "+quote(a)).Scan(&argA)
		conn.QueryRow(context.Background(), "SELECT arguments FROM "+db+".calls WHERE id = "+quote(b)).Scan(&argB)
		if argA == argB {
			t.Skip("the two calls have the same arguments")
		}
		mutate(t, conn, db, "ALTER TABLE "+db+".calls UPDATE arguments = multiIf(id = "+quote(a)+", "+quote(argB)+", "+quote(argA)+") WHERE id IN ("+quote(a)+", "+quote(b)+")")
		return []string{"call " + a, "call " + b, "contents differ"}
	})
	f("a finding deleted", func(t *testing.T, conn driver.Conn, db string) []string {
		id := firstID(t, conn, db, "findings", findingTenant, 0)
		tm := timeOf(t, conn, db, "findings", id)
		mutate(t, conn, db, "ALTER TABLE "+db+".findings DELETE WHERE id = "+quote(id))
		return []string{"deleted: findings of time " + tm}
	})
	f("a finding's severity edited", func(t *testing.T, conn driver.Conn, db string) []string {
		id := firstID(t, conn, db, "findings", findingTenant, 0)
		mutate(t, conn, db, "ALTER TABLE "+db+".findings UPDATE severity = if(severity = 'critical', 'info', 'critical') WHERE id = "+quote(id))
		return []string{"finding " + id, "contents differ"}
	})
	f("a finding state change deleted", func(t *testing.T, conn driver.Conn, db string) []string {
		mutate(t, conn, db, "ALTER TABLE "+db+".finding_changes DELETE WHERE 1")
		return []string{"(changes, 1 row,", "its 1 row is gone"}
	})
	f("a chain entry deleted", func(t *testing.T, conn driver.Conn, db string) []string {
		mutate(t, conn, db, "ALTER TABLE "+db+".chain DELETE WHERE tenant = 'acme' AND seq = 1")
		return []string{"entry 1 is missing", "calls: in no chain entry of their tenant"}
	})
	f("every checkpoint deleted", func(t *testing.T, conn driver.Conn, db string) []string {
		mutate(t, conn, db, "ALTER TABLE "+db+".checkpoints DELETE WHERE 1")
		return []string{"none is stored"}
	})
}

// TestVerify_SignedBeforeFirstTick: a signed store verifies from the
// start: New signs the replica's first checkpoint, so that calls stored
// before the first tick are an unsigned tail (a note), not "none is
// stored" (the sign of checkpoints deleted).
func TestVerify_SignedBeforeFirstTick(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions(t)
	o.Ack = AckInsert
	o.SigningKey = priv
	o.CheckpointEvery = time.Hour
	s := openStore(t, o)
	ingest(t, s, exampleCalls(t))
	r, err := Verify(context.Background(), o.DSN, o.Database, chain.KeysOf(pub))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	r.Print(&b)
	if !r.OK() || r.Checkpoints != 1 || !strings.Contains(b.String(), "not signed yet") {
		t.Fatalf("a signed store before its first tick: want ok, 1 checkpoint and an unsigned tail:\n%s", b.String())
	}
}

// TestVerify_Rewritten deletes a call and recomputes its tenant's chain
// whole, as someone who can write the tables but lacks the signing key
// would: the chains agree with themselves, the signed checkpoint does not.
func TestVerify_Rewritten(t *testing.T) {
	o, pub, conn := chainedStore(t, AckInsert)
	db := o.Database
	ctx := context.Background()
	var es []chainRow
	err := each(ctx, conn, "read", "SELECT "+strings.Join(chainColumns, ", ")+" FROM "+db+".chain FINAL WHERE tenant = 'acme' ORDER BY seq", func(rows driver.Rows) error {
		var r chainRow
		var n uint64
		var digest, prev, hash string
		var tm time.Time
		var ns uint32
		var sums []string
		if err := rows.Scan(&r.Tenant, &r.Replica, &r.Seq, &r.Kind, &r.Nonce, &n, &digest, &prev, &hash, &tm, &ns, &sums, &r.Times); err != nil {
			return err
		}
		r.Time = time.Unix(tm.Unix(), int64(ns))
		for _, s := range sums {
			r.Sums = append(r.Sums, sum([]byte(s)))
		}
		es = append(es, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The call listed fifth in acme's first entry goes.
	var id string
	err = each(ctx, conn, "read", "SELECT "+callSelect+" FROM "+db+".calls WHERE tenant = 'acme'", func(rows driver.Rows) error {
		r, err := scanCall(rows)
		if err == nil && callSum(&r) == es[0].Sums[4] {
			id = r.ID
		}
		return err
	})
	if err != nil || id == "" {
		t.Fatalf("cannot find the call listed fifth: %v", err)
	}
	es[0].Sums = append(es[0].Sums[:4:4], es[0].Sums[5:]...)
	es[0].Times = append(es[0].Times[:4:4], es[0].Times[5:]...)
	var prev chain.Hash
	for i := range es {
		e := &es[i]
		e.Prev = prev
		e.Digest = digestOf(e.Sums, e.Times)
		ent := e.entry()
		e.Hash = ent.Hash()
		prev = e.Hash
	}
	mutate(t, conn, db, "ALTER TABLE "+db+".chain DELETE WHERE tenant = 'acme'")
	mutate(t, conn, db, "ALTER TABLE "+db+".calls DELETE WHERE id = "+quote(id))
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".chain ("+strings.Join(chainColumns, ", ")+")")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range chainColumnValues(es) {
		if err := b.Column(i).Append(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	r, text := verifyOf(t, o, nil)
	if !r.OK() || !strings.Contains(text, "no public key given") {
		t.Errorf("without the public key, a chain rewritten whole should pass with a note:\n%s", text)
	}
	r, text = verifyOf(t, o, pub)
	t.Logf("with the public key:\n%s", text)
	if r.OK() || !strings.Contains(text, "with another hash: the history up to it was rewritten") {
		t.Errorf("the signed checkpoint does not catch the rewrite:\n%s", text)
	}
	other, _, _ := ed25519.GenerateKey(nil)
	if r, text := verifyOf(t, o, other); r.OK() || !strings.Contains(text, "does not verify") {
		t.Errorf("checkpoints pass with another key:\n%s", text)
	}
}

// TestVerify_AcrossRestarts reopens the store: its chains go on from the
// heads stored, in both acknowledgement modes, and verify passes.
func TestVerify_AcrossRestarts(t *testing.T) {
	o, pub, conn := chainedStore(t, AckLog)
	s := openStore(t, o)
	calls := exampleCalls(t)[:10]
	var again []*audit.Call
	for _, c := range calls {
		cp := *c
		cp.Tenant = "acme"
		cp.ID += "-again"
		again = append(again, &cp)
	}
	ingest(t, s, again)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	o.Ack = AckInsert
	s = openStore(t, o)
	ingest(t, s, again) // stored twice: the store collapses it later
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, text := verifyOf(t, o, pub)
	if !r.OK() {
		t.Fatalf("verify after restarts:\n%s", text)
	}
	if n := count(t, conn, "SELECT max(seq) FROM "+o.Database+".chain WHERE tenant = 'acme'"); n < 5 {
		t.Errorf("acme's chain ends at entry %d: the restarts did not extend it", n)
	}
	t.Logf("%s", text)
}

// TestVerify_RetentionCut runs retention over a store with a signing key:
// the rows and entries it removes are accepted, the cut is signed, and a
// cut whose checkpoints are deleted is reported: a note (its cut entry is
// after every head still signed, as a keyless serve's), TAMPERED under
// --key-always.
func TestVerify_RetentionCut(t *testing.T) {
	o, pub, conn := chainedStore(t, AckInsert)
	// The examples are dated 2026-11-02: keep acme 1 day from a "now" a
	// week later, everything else forever.
	o.Retention.Tenants = map[string]time.Duration{"acme": 24 * time.Hour}
	s := openStore(t, o)
	now := time.Date(2026, 11, 9, 0, 0, 0, 0, time.UTC)
	if err := s.enforceRetention(context.Background(), now); err != nil {
		t.Fatalf("enforceRetention: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count() FROM "+o.Database+".calls WHERE tenant = 'acme'"); n != 0 {
		t.Fatalf("retention left %d calls of acme", n)
	}
	r, text := verifyOf(t, o, pub)
	t.Logf("after retention:\n%s", text)
	if !r.OK() {
		t.Fatalf("verify after retention:\n%s", text)
	}
	if n := count(t, conn, "SELECT count() FROM "+o.Database+".chain WHERE tenant = 'acme' AND kind = 'calls'"); n != 0 {
		t.Errorf("%d chain entries of acme's calls left after retention removed every call", n)
	}
	if n := count(t, conn, "SELECT count() FROM "+o.Database+".chain WHERE tenant = 'acme' AND kind = 'cut'"); n != 1 {
		t.Errorf("%d cut entries of acme, want 1", n)
	}
	mutate(t, conn, o.Database, "ALTER TABLE "+o.Database+".checkpoints DELETE WHERE position(body, '\"cuts\"') > 0")
	r, text = verifyOf(t, o, pub)
	if !r.OK() || len(r.UnsignedCuts) != 1 || !strings.Contains(text, "no checkpoint signed it") {
		t.Errorf("a cut no checkpoint signed, after the last checkpoint, is not the note of an unsigned cut:\n%s", text)
	}
	if r.Strict(); r.OK() {
		t.Errorf("--key-always: a cut no checkpoint signed goes unnoticed")
	}
}

// TestVerify_DeleteTenantBefore: the retention serve runs (DeleteBefore,
// DeleteTenantBefore) cuts the chains as the store's own does.
func TestVerify_DeleteTenantBefore(t *testing.T) {
	o, pub, conn := chainedStore(t, AckInsert)
	s := openStore(t, o)
	cut := time.Date(2026, 11, 8, 0, 0, 0, 0, time.UTC)
	if _, err := s.DeleteTenantBefore(context.Background(), "globex", cut); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteBefore(context.Background(), cut, "globex", "acme"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count() FROM "+o.Database+".calls WHERE tenant = 'globex'"); n != 0 {
		t.Fatalf("%d calls of globex left", n)
	}
	if r, text := verifyOf(t, o, pub); !r.OK() {
		t.Fatalf("verify after DeleteTenantBefore:\n%s", text)
	}
}

// TestVerify_AdoptsHistory: rows stored before migration 0004 (chain_entry
// 0) are chained when the migration is applied, so that verify passes on a
// store that was upgraded, and catches a row inserted afterwards.
func TestVerify_AdoptsHistory(t *testing.T) {
	o, pub, conn := chainedStore(t, AckInsert)
	db := o.Database
	// Rows as a release before the chain stored them.
	sel := strings.Replace(callSelect, ", id, ", ", concat(id, '-old'), ", 1)
	sel = strings.Replace(sel, ", chain_entry", ", toUInt64(0)", 1)
	if err := conn.Exec(context.Background(), "INSERT INTO "+db+".calls ("+callSelect+") SELECT "+sel+" FROM "+db+".calls WHERE tenant = 'acme'"); err != nil {
		t.Fatal(err)
	}
	if r, text := verifyOf(t, o, pub); r.OK() || !strings.Contains(text, "in no chain entry") {
		t.Fatalf("rows without an entry went unnoticed:\n%s", text)
	}
	// The store is upgraded: migration 0004 runs (again) and adopts them.
	mutate(t, conn, db, "ALTER TABLE "+db+".schema_migrations DELETE WHERE version = 4")
	s := openStore(t, o)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, text := verifyOf(t, o, pub)
	if !r.OK() {
		t.Fatalf("verify after the history was adopted:\n%s", text)
	}
	t.Logf("after adoption:\n%s", text)
	id := firstID(t, conn, db, "calls", "acme", 0)
	sel = strings.Replace(callSelect, ", id, ", ", concat(id, '-new'), ", 1)
	sel = strings.Replace(sel, ", chain_entry", ", toUInt64(0)", 1)
	if err := conn.Exec(context.Background(), "INSERT INTO "+db+".calls ("+callSelect+") SELECT "+sel+" FROM "+db+".calls WHERE id = "+quote(id)); err != nil {
		t.Fatal(err)
	}
	if r, text := verifyOf(t, o, pub); r.OK() || !strings.Contains(text, id+"-new") {
		t.Errorf("a row inserted with chain_entry 0 after the adoption went unnoticed:\n%s", text)
	}
}
