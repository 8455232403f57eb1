package sqlite_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
)

// retained is a data dir of a signed store with its calls in call logs of
// small segments, written period by period: each period's calls and a
// finding, then a retention pass that cuts at the start of the period
// before, as serve's retention would, one period's age behind.
type retained struct {
	dir  string
	key  ed25519.PrivateKey
	keys chain.Keys
	recs []audit.Record // by time
	per  int            // calls a period
	// head is the last seq of the tenant's chain after each period.
	head []int64
}

func newRetained(t *testing.T, periods, per int) *retained {
	t.Helper()
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{52}, ed25519.SeedSize))
	g, err := storetest.NewGenerator(52, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	recs := g.Records(periods * per)
	slices.SortFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	return &retained{dir: t.TempDir(), key: key, keys: chain.KeysOf(key.Public().(ed25519.PublicKey)), recs: recs, per: per}
}

func (r *retained) open(t *testing.T) *sqlite.Store {
	t.Helper()
	logs, err := calllogs.Open(calllogs.Dir(r.dir), calllog.Options{SegmentBytes: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(filepath.Join(r.dir, "audit.db"), sqlite.Options{Calls: sqlite.CallsLog, CallLog: logs, SigningKey: r.key})
	if err != nil {
		logs.Close()
		t.Fatal(err)
	}
	return st
}

// period writes period i (calls in blocks of ten, one finding at its
// middle) and, from the third on, runs retention at the start of the
// period before.
func (r *retained) period(t *testing.T, i int) {
	t.Helper()
	ctx := context.Background()
	st := r.open(t)
	batch := r.recs[i*r.per : (i+1)*r.per]
	for j := 0; j < len(batch); j += 10 {
		if _, err := st.AppendCalls(ctx, batch[j:j+10]); err != nil {
			t.Fatal(err)
		}
	}
	c := batch[len(batch)/2].Call
	f := audit.Finding{Kind: audit.KindUnsafeRetry, Severity: audit.SeverityWarning, Server: c.Server, Tenant: c.Tenant,
		Time: c.Time, Calls: []string{c.ID}, Summary: "period " + strconv.Itoa(i)}
	if err := st.Commit(ctx, audit.Results{Findings: []audit.Finding{f}}); err != nil {
		t.Fatal(err)
	}
	if i >= 2 {
		r.retain(t, st, i)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	r.head = append(r.head, r.query(t, `SELECT max(seq) FROM chain`))
}

// retain runs a retention pass of st at the start of period i-1.
func (r *retained) retain(t *testing.T, st *sqlite.Store, i int) {
	t.Helper()
	if _, err := st.DeleteBefore(context.Background(), r.recs[(i-1)*r.per].Call.Time); err != nil {
		t.Fatal(err)
	}
}

func (r *retained) db(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dir, "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func (r *retained) query(t *testing.T, q string) int64 {
	t.Helper()
	db := r.db(t, r.dir)
	var n sql.NullInt64
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	db.Close()
	return n.Int64
}

// onDisk returns the numbers of the segment files of the (one) tenant's
// log.
func (r *retained) onDisk(t *testing.T) []uint64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(calllogs.Dir(r.dir), "*", "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, f := range files {
		n, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(f), ".seg"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (r *retained) verify(t *testing.T, dir string) (bool, string) {
	t.Helper()
	rep, err := sqlite.VerifyLogged(context.Background(), filepath.Join(dir, "audit.db"), r.keys, func() (sqlite.BlockLog, error) {
		return calllogs.Open(calllogs.Dir(dir), calllog.Options{ReadOnly: true})
	})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	rep.Print(&b)
	return rep.OK(), b.String()
}

// checkPruned checks that the records of the blocks of removed segments
// are gone and the chain cut past the entries retention emptied: those of
// the blocks, the superseded logcut entries and the findings entries
// behind them (every period before keptFrom).
func (r *retained) checkPruned(t *testing.T, keptFrom int) {
	t.Helper()
	disk := r.onDisk(t)
	if len(disk) == 0 {
		t.Fatal("no segment on disk")
	}
	if n := r.query(t, `SELECT count(*) FROM chain_blocks WHERE seg < `+strconv.FormatUint(disk[0], 10)); n > 0 {
		t.Errorf("chain_blocks holds %d records of blocks in segments retention removed (the first on disk is %d)", n, disk[0])
	}
	for _, seg := range r.segsRecorded(t) {
		if !slices.Contains(disk, seg) {
			t.Errorf("chain_blocks holds records of segment %d, not on disk (%v)", seg, disk)
		}
	}
	// Entries of the periods before keptFrom (blocks, findings, pruned,
	// logcut and cut entries) are all gone; one logcut entry and one
	// findings entry a period are left at most.
	first := r.query(t, `SELECT min(seq) FROM chain`)
	if first <= r.head[keptFrom-1] {
		t.Errorf("the chain starts at entry %d, at or before the last entry of period %d (%d), which retention emptied", first, keptFrom-1, r.head[keptFrom-1])
	}
	left := int64(len(r.head) - keptFrom)
	for _, kind := range []string{"logcut", "findings"} {
		if n := r.query(t, `SELECT count(*) FROM chain WHERE kind = '`+kind+`'`); n > left {
			t.Errorf("%d %s entries in the chain, want %d at most (those of the periods from %d on)", n, kind, left, keptFrom)
		}
	}
}

func (r *retained) segsRecorded(t *testing.T) []uint64 {
	t.Helper()
	rows, err := r.db(t, r.dir).Query(`SELECT DISTINCT seg FROM chain_blocks ORDER BY seg`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []uint64
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, uint64(s))
	}
	return out
}

func (r *retained) copyDir(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(r.dir)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestRetention_PrunesTheChainOfTheCallLog: over eight periods, each with
// a retention pass, the records of the blocks of the segments retention
// removed go, and the chain is cut past the blocks entries that lose every
// record, the superseded logcut entries and the findings entries behind
// them; an entry with blocks in a removed segment and in a kept one keeps
// the hashes of the removed ones (chain_pruned). Verify with the public
// key passes; a deleted record of a kept block, or a deleted hash of a
// removed one, is still TAMPERED. Fails on main: chain_blocks kept every
// record, and the chain was cut before its first blocks entry at most.
func TestRetention_PrunesTheChainOfTheCallLog(t *testing.T) {
	r := newRetained(t, 8, 100)
	for i := range 8 {
		r.period(t, i)
	}
	r.checkPruned(t, 5)
	ok, out := r.verify(t, r.dir)
	if !ok {
		t.Fatalf("verify after retention: want ok:\n%s", out)
	}
	t.Run("record_of_a_kept_block_deleted", func(t *testing.T) {
		dir := r.copyDir(t)
		db := r.db(t, dir)
		if _, err := db.Exec(`DELETE FROM chain_blocks WHERE (seg, block) = (SELECT seg, block FROM chain_blocks ORDER BY seg, block LIMIT 1 OFFSET 1)`); err != nil {
			t.Fatal(err)
		}
		db.Close()
		ok, out := r.verify(t, dir)
		if ok || !strings.Contains(out, "is in no chain entry of its tenant") {
			t.Errorf("verify of a deleted record of a kept block: want TAMPERED:\n%s", out)
		}
	})
	t.Run("hash_of_a_removed_block_deleted", func(t *testing.T) {
		dir := r.copyDir(t)
		db := r.db(t, dir)
		res, err := db.Exec(`DELETE FROM chain_pruned WHERE (tenant, seq, row) =
			(SELECT tenant, seq, row FROM chain_pruned WHERE typeof(row) = 'blob' AND substr(row, 1, 1) = x'6b' LIMIT 1)`)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("no hash of a removed block kept: want an entry with blocks in a removed and a kept segment")
		}
		db.Close()
		ok, out := r.verify(t, dir)
		if ok || !strings.Contains(out, "records of blocks deleted") {
			t.Errorf("verify of a deleted hash of a removed block: want TAMPERED:\n%s", out)
		}
	})
}

// TestRetention_PrunesAStoreOfTheReleaseBefore: a data dir whose retention
// kept every record of a block and every blocks and logcut entry (as the
// releases before chainret52 did; written here with that behaviour
// switched back on, sqlite.KeepChainRecords) verifies, and the first
// retention pass of this release prunes it as if it had always run: the
// records of removed segments go and the chain is cut past them; verify
// passes before and after.
func TestRetention_PrunesAStoreOfTheReleaseBefore(t *testing.T) {
	r := newRetained(t, 8, 100)
	restore := sqlite.KeepChainRecords()
	for i := range 7 {
		r.period(t, i)
	}
	restore()
	if ok, out := r.verify(t, r.dir); !ok {
		t.Fatalf("verify of the store written as before: want ok:\n%s", out)
	}
	disk := r.onDisk(t)
	if n := r.query(t, `SELECT count(*) FROM chain_blocks WHERE seg < `+strconv.FormatUint(disk[0], 10)); n == 0 {
		t.Fatal("the store written as before holds no record of a removed segment's block: nothing to prune")
	}
	if first := r.query(t, `SELECT min(seq) FROM chain`); first != 1 {
		t.Fatalf("the store written as before: its chain starts at %d, want 1 (never cut past its first blocks entry)", first)
	}
	r.period(t, 7)
	r.checkPruned(t, 5)
	if ok, out := r.verify(t, r.dir); !ok {
		t.Fatalf("verify after the first retention pass of this release: want ok:\n%s", out)
	}
}
