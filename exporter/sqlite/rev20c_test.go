package sqlite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/exporter/chain"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// TestRev20c_ForgedCutSignedByRunningServe (review rev20c, D1 in the
// embedded store): until rev20c a checkpoint signed every cut chain_cuts
// held, not the cuts the store made. Someone who can write the
// file while serve runs with its key removes acme's first two entries and
// their calls and records that as a retention cut with its cut entry; the
// next commit's checkpoint signs the forged cut and verify --key-always
// passed it. Now the forged cut is left unsigned, and the checkpoints
// that sign past its cut entry make it TAMPERED even without
// --key-always.
func TestRev20c_ForgedCutSignedByRunningServe(t *testing.T) {
	s, path, pub, _ := openSigned(t, Options{})
	ctx := context.Background()
	_, recs := tenantRecords(t, 400)
	for i := 0; i < 300; i += 100 {
		if _, err := s.AppendCalls(ctx, recs[i:i+100]); err != nil {
			t.Fatal(err)
		}
	}
	db := openRaw(t, path)
	defer db.Close()
	var prev, head []byte
	var last, rows1, rows2 int64
	if err := db.QueryRow(`SELECT prev FROM chain WHERE tenant = 'acme' AND seq = 3`).Scan(&prev); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT seq, hash FROM chain WHERE tenant = 'acme' ORDER BY seq DESC LIMIT 1`).Scan(&last, &head); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT (SELECT first FROM chain WHERE tenant = 'acme' AND seq = 1), (SELECT last FROM chain WHERE tenant = 'acme' AND seq = 2)`).
		Scan(&rows1, &rows2); err != nil {
		t.Fatal(err)
	}
	before := storetest.T0.UnixNano() // older than every call removed
	e := chain.Entry{Tenant: "acme", Seq: last + 1, Kind: chain.KindCut, First: 3, Last: 3, Digest: chain.CutDigest(3, prev, before),
		Prev: chain.Hash(head), Time: time.Now()}
	h := e.Hash()
	for _, q := range []string{
		fmt.Sprintf(`DELETE FROM calls WHERE rid BETWEEN %d AND %d AND tenant = (SELECT id FROM strs WHERE s = 'acme')`, rows1, rows2),
		`DELETE FROM chain WHERE tenant = 'acme' AND seq < 3`,
		fmt.Sprintf(`INSERT INTO chain_cuts (tenant, seq, prev, before) VALUES ('acme', 3, x'%x', %d)`, prev, before),
		fmt.Sprintf(`INSERT INTO chain (tenant, seq, kind, first, last, n, digest, prev, hash, time) VALUES ('acme', %d, 'cut', 3, 3, 0, x'%x', x'%x', x'%x', %d)`,
			e.Seq, e.Digest[:], e.Prev[:], h[:], e.Time.UnixNano()),
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// serve goes on: the next commit checkpoints.
	if _, err := s.AppendCalls(ctx, recs[300:400]); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, out := report(t, path, pub)
	if r.OK() || !strings.Contains(out, "no checkpoint signed it") {
		t.Errorf("a cut forged while a keyed serve ran is not reported as a removal:\n%s", out)
	}
}
