package sqlite

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/mcpaudit/mcpaudit/exporter/chain"
)

// Tamper evidence (package chain): every commit that stores new calls,
// findings or finding state changes of a tenant appends an entry to the
// tenant's chain in the same transaction. Calls are named by their row
// ids (AUTOINCREMENT: never reused), findings by the entry seq they carry,
// changes by their row ids; answers kept aside (answers_late) by the entry
// seq they carry, in an answers entry made by the transaction that keeps
// them. Retention and answers record the hashes of the rows they remove
// (chain_pruned), and those records are chained too: each transaction
// that makes records appends, per entry they were removed from, a pruned
// entry covering them, whose seq the records carry (review ch19: a record
// that no entry covered could be forged beside a deleted call, and
// verify took the deletion for retention's). Retention removes the
// entries all of whose rows went, records the cut (chain_cuts) and
// appends a cut entry, so that whether a checkpoint was made after the cut
// is on record. Checkpoints sign every head and cut when a signing key is
// configured.
var chainSchema = []string{
	`CREATE TABLE IF NOT EXISTS chain (
		tenant TEXT    NOT NULL,
		seq    INTEGER NOT NULL,
		kind   TEXT    NOT NULL,
		first  INTEGER NOT NULL,
		last   INTEGER NOT NULL,
		n      INTEGER NOT NULL,
		digest BLOB    NOT NULL,
		prev   BLOB    NOT NULL,
		hash   BLOB    NOT NULL,
		time   INTEGER NOT NULL,
		PRIMARY KEY (tenant, seq)
	) WITHOUT ROWID, STRICT`,
	// The hashes of rows retention deleted from entries that still hold
	// others: row is the call's rid, or the finding's packed id.
	`CREATE INDEX IF NOT EXISTS chain_last ON chain (tenant, kind, last)`,
	`CREATE TABLE IF NOT EXISTS chain_pruned (
		tenant TEXT    NOT NULL,
		seq    INTEGER NOT NULL,
		row    ANY     NOT NULL,
		hash   BLOB    NOT NULL,
		entry  INTEGER NOT NULL DEFAULT 0, -- the pruned entry that covers it
		PRIMARY KEY (tenant, seq, row)
	) WITHOUT ROWID, STRICT`,
	`CREATE TABLE IF NOT EXISTS chain_cuts (
		tenant TEXT    NOT NULL PRIMARY KEY,
		seq    INTEGER NOT NULL, -- the first entry kept
		prev   BLOB    NOT NULL, -- its prev
		before INTEGER NOT NULL  -- the retention cutoff
	) WITHOUT ROWID, STRICT`,
	`CREATE TABLE IF NOT EXISTS checkpoints (
		seq  INTEGER PRIMARY KEY,
		time INTEGER NOT NULL,
		body BLOB    NOT NULL,
		sig  BLOB    NOT NULL
	) STRICT`,
}

// callHash hashes a stored call row.
func callHash(rid int64, id any, tenant string, t int64, rec []byte) chain.Hash {
	return chain.RowHash(chain.Int(rid), idBytes(id), []byte(tenant), chain.Int(t), rec)
}

// findingHash hashes a stored finding row.
func findingHash(f *findingRow) chain.Hash {
	return chain.RowHash(idBytes(f.id), chain.Int(f.time), []byte(f.kind), chain.Int(int64(f.severity)),
		[]byte(f.server), []byte(f.tenant), []byte(f.doc), []byte(f.key), []byte(f.session), f.body)
}

// changeHash hashes a stored finding state change.
func changeHash(seq int64, fid any, tenant, state, by, note string, t int64) chain.Hash {
	return chain.RowHash(chain.Int(seq), idBytes(fid), []byte(tenant), []byte(state), []byte(by), []byte(note), chain.Int(t))
}

// answerHash hashes an answer kept aside (answers_late).
func answerHash(id any, tenant string, t int64, rec []byte) chain.Hash {
	return chain.RowHash([]byte("answer"), idBytes(id), []byte(tenant), chain.Int(t), rec)
}

// prunedRowBytes returns the row of a chain_pruned record (a call's or
// change's rid, or a finding's or answer's idBytes) as bytes, the two
// forms told apart.
func prunedRowBytes(row any) []byte {
	switch v := row.(type) {
	case int64:
		return append([]byte{'i'}, chain.Int(v)...)
	case []byte:
		return append([]byte{'b'}, v...)
	}
	return []byte(fmt.Sprint(row))
}

// prunedRow is one record of chain_pruned: a removed row and its hash.
type prunedRow struct {
	row  any
	hash chain.Hash
}

// prunedDigest is the digest of a pruned entry: its records ordered by
// row, each hashed with its row.
func prunedDigest(rows []prunedRow) chain.Hash {
	bs := make([][]byte, len(rows))
	for i := range rows {
		bs[i] = prunedRowBytes(rows[i].row)
	}
	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return bytes.Compare(bs[idx[a]], bs[idx[b]]) < 0 })
	hs := make([]chain.Hash, len(rows))
	for i, j := range idx {
		hs[i] = chain.RowHash(bs[j], rows[j].hash[:])
	}
	return chain.Digest(hs)
}

// pruning collects the records of the rows one transaction removes from
// the entries that chained them, by tenant and entry.
type pruning map[entryKey][]prunedRow

// add records that row (hash h) left entry seq of tenant.
func (p pruning) add(tenant string, seq int64, row any, h chain.Hash) {
	k := entryKey{tenant, seq}
	p[k] = append(p[k], prunedRow{row: row, hash: h})
}

// store writes the records to chain_pruned, each group under a pruned
// entry of its own (First = Last = the entry the rows left), and empties
// p. One entry per group, not per transaction: retention then cuts an
// entry with its records, and the pruned entry that covered them is
// known to cover an entry cut (verify expects none of its records left).
func (p pruning) store(ctx context.Context, q queryer, now time.Time) error {
	return p.chain(ctx, q, now, func(k entryKey, rows []prunedRow, seq int64) error {
		for _, r := range rows {
			if _, err := q.ExecContext(ctx, `INSERT OR REPLACE INTO chain_pruned (tenant, seq, row, hash, entry) VALUES (?, ?, ?, ?, ?)`,
				k.tenant, k.seq, r.row, r.hash[:], seq); err != nil {
				return fmt.Errorf("cannot record a removed row: %w", err)
			}
		}
		return nil
	})
}

// chain appends a pruned entry for each group of p, in tenant and entry
// order, calls write with the group and its entry's seq, and empties p.
func (p pruning) chain(ctx context.Context, q queryer, now time.Time, write func(k entryKey, rows []prunedRow, seq int64) error) error {
	keys := make([]entryKey, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].tenant != keys[j].tenant {
			return keys[i].tenant < keys[j].tenant
		}
		return keys[i].seq < keys[j].seq
	})
	for _, k := range keys {
		rows := p[k]
		seq, err := appendEntry(ctx, q, chain.Entry{Tenant: k.tenant, Kind: chain.KindPruned, First: k.seq, Last: k.seq,
			N: int64(len(rows)), Digest: prunedDigest(rows), Time: now})
		if err != nil {
			return fmt.Errorf("cannot chain the records of removed rows: %w", err)
		}
		if err := write(k, rows, seq); err != nil {
			return err
		}
	}
	clear(p)
	return nil
}

// idBytes returns a stored id (packed blob or text) as bytes, the two
// forms told apart.
func idBytes(id any) []byte {
	switch v := id.(type) {
	case []byte:
		return append([]byte{'b'}, v...)
	case string:
		return append([]byte{'t'}, v...)
	}
	return []byte(fmt.Sprint(id))
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// head returns the last entry's seq and hash of tenant (zero when none,
// or the cut's when retention removed every entry).
func head(ctx context.Context, q queryer, tenant string) (int64, chain.Hash, error) {
	var seq int64
	var h []byte
	err := q.QueryRowContext(ctx, `SELECT seq, hash FROM chain WHERE tenant = ? ORDER BY seq DESC LIMIT 1`, tenant).Scan(&seq, &h)
	if errors.Is(err, sql.ErrNoRows) {
		err = q.QueryRowContext(ctx, `SELECT seq - 1, prev FROM chain_cuts WHERE tenant = ?`, tenant).Scan(&seq, &h)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, chain.Hash{}, nil
		}
	}
	var out chain.Hash
	copy(out[:], h)
	return seq, out, err
}

// appendEntry adds the next entry of e.Tenant's chain (e.Seq, e.Prev and
// e.Time are set here) and returns its seq.
func appendEntry(ctx context.Context, q queryer, e chain.Entry) (int64, error) {
	seq, prev, err := head(ctx, q, e.Tenant)
	if err != nil {
		return 0, err
	}
	e.Seq, e.Prev = seq+1, prev
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	h := e.Hash()
	_, err = q.ExecContext(ctx, `INSERT INTO chain (tenant, seq, kind, first, last, n, digest, prev, hash, time)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, e.Tenant, e.Seq, e.Kind, e.First, e.Last, e.N, e.Digest[:], e.Prev[:], h[:], e.Time.UnixNano())
	return e.Seq, err
}

// rowHash is a row id (or finding id) and its hash, for a digest.
type rowHash struct {
	row  int64
	id   []byte // findings: ordered by id
	hash chain.Hash
}

// chainCalls appends one calls entry per tenant for the calls a commit
// stored, given in rid order.
func chainCalls(ctx context.Context, q queryer, byTenant map[string][]rowHash, now time.Time) error {
	for _, tenant := range sortedKeys(byTenant) {
		rows := byTenant[tenant]
		hs := make([]chain.Hash, len(rows))
		for i := range rows {
			hs[i] = rows[i].hash
		}
		if _, err := appendEntry(ctx, q, chain.Entry{Tenant: tenant, Kind: chain.KindCalls, First: rows[0].row,
			Last: rows[len(rows)-1].row, N: int64(len(rows)), Digest: chain.Digest(hs), Time: now}); err != nil {
			return fmt.Errorf("cannot chain calls: %w", err)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// findingsDigest orders finding hashes by id and digests them.
func findingsDigest(rows []rowHash) chain.Hash {
	sort.Slice(rows, func(i, j int) bool { return bytes.Compare(rows[i].id, rows[j].id) < 0 })
	hs := make([]chain.Hash, len(rows))
	for i := range rows {
		hs[i] = rows[i].hash
	}
	return chain.Digest(hs)
}

// checkpoint signs every head, and every cut signable allows, when they
// changed since the last checkpoint (or force), with key; nil key makes
// none.
func checkpoint(ctx context.Context, tx *sql.Tx, key ed25519.PrivateKey, now time.Time, force bool, signable func(chain.Cut) bool) error {
	if key == nil {
		return nil
	}
	body := chain.Body{Time: now}
	rows, err := tx.QueryContext(ctx, `SELECT tenant, seq, hash FROM chain c WHERE seq = (SELECT max(seq) FROM chain WHERE tenant = c.tenant)`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var h chain.Head
		var hash []byte
		if err := rows.Scan(&h.Tenant, &h.Seq, &hash); err != nil {
			rows.Close()
			return err
		}
		h.Hash = chain.Hash(hash).String()
		body.Heads = append(body.Heads, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	cuts, err := loadCuts(ctx, tx)
	if err != nil {
		return err
	}
	for _, c := range cuts {
		if signable(c) {
			body.Cuts = append(body.Cuts, c)
		}
	}
	var last int64
	var lastBody []byte
	err = tx.QueryRowContext(ctx, `SELECT seq, body FROM checkpoints ORDER BY seq DESC LIMIT 1`).Scan(&last, &lastBody)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if !force && lastBody != nil {
		var prev chain.Body
		if err := json.Unmarshal(lastBody, &prev); err == nil && sameHeads(prev, body) {
			return nil
		}
	}
	// The first checkpoint of a signed store is made even with nothing to
	// sign (Open makes it), so that verify can tell a store whose chain has
	// not been signed yet (entries after a checkpoint: a note) from one whose
	// checkpoints were deleted (none at all: a finding).
	if len(body.Heads) == 0 && len(body.Cuts) == 0 && lastBody != nil {
		return nil
	}
	cp := chain.Sign(last+1, body, key)
	_, err = tx.ExecContext(ctx, `INSERT INTO checkpoints (seq, time, body, sig) VALUES (?, ?, ?, ?)`, cp.Seq, now.UnixNano(), cp.Body, cp.Sig)
	return err
}

func sameHeads(a, b chain.Body) bool {
	// The signer's key is no head: a restart with a new key signs again
	// only when the heads move.
	ea, eb := a, b
	ea.Time, eb.Time = time.Time{}, time.Time{}
	ea.Key, eb.Key = "", ""
	return bytes.Equal(ea.Encode(), eb.Encode())
}

// loadCuts returns every cut, by tenant.
func loadCuts(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}) (map[string]chain.Cut, error) {
	rows, err := q.QueryContext(ctx, `SELECT tenant, seq, prev, before FROM chain_cuts`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]chain.Cut{}
	for rows.Next() {
		var c chain.Cut
		var prev []byte
		var before int64
		if err := rows.Scan(&c.Tenant, &c.Seq, &prev, &before); err != nil {
			return nil, err
		}
		c.Prev = chain.Hash(prev).String()
		c.Before = fromNanos(before)
		out[c.Tenant] = c
	}
	return out, rows.Err()
}

// cutChains removes, for every tenant, the leading entries all of whose
// rows retention deleted, with the records of their rows, records where
// each chain now starts (chain_cuts) and appends a cut entry saying so:
// retention cuts at before. A pruned entry is cut when the cut reaches it:
// the entry it recorded rows of came before it, and went first. A prefix
// of pruned and cut entries alone is left, so that a tenant whose rows
// all went does not get a new cut at every sweep. A blocks entry is gone
// when the records of all its blocks went, those recorded in chain_pruned
// and those in blocks (the records this transaction removes, not written
// yet); a logcut entry when a later logcut entry of its tenant supersedes
// it: the latest stays, so that verify always has the tenant's cut of its
// log. It returns the entries cut and, by tenant cut, the seq its chain
// now starts at.
func cutChains(ctx context.Context, tx *sql.Tx, before int64, blocks pruning) (int, map[string]int64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT c.tenant, c.seq, c.kind, c.n, c.prev, (SELECT count(*) FROM chain_pruned p
		WHERE p.tenant = c.tenant AND p.seq = c.seq) FROM chain c ORDER BY c.tenant, c.seq`)
	if err != nil {
		return 0, nil, err
	}
	type ent struct {
		tenant, kind string
		seq, n, p    int64
		prev         []byte
	}
	var all []ent
	for rows.Next() {
		var e ent
		if err := rows.Scan(&e.tenant, &e.seq, &e.kind, &e.n, &e.prev, &e.p); err != nil {
			rows.Close()
			return 0, nil, err
		}
		all = append(all, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	lastLogCut := map[string]int64{}
	for _, e := range all {
		if e.kind == chain.KindLogCut {
			lastLogCut[e.tenant] = e.seq
		}
	}
	gone := func(e ent) bool {
		if keepChainRecords && (e.kind == chain.KindBlocks || e.kind == chain.KindLogCut) {
			return false
		}
		switch e.kind {
		case chain.KindBlocks:
			return e.p+int64(len(blocks[entryKey{e.tenant, e.seq}])) == e.n
		case chain.KindLogCut:
			return e.seq < lastLogCut[e.tenant]
		}
		return e.kind == chain.KindPruned || e.kind == chain.KindCut || e.p == e.n
	}
	starts := map[string]int64{}
	now := time.Now()
	cut := 0
	for i := 0; i < len(all); {
		j := i
		rowsGone := false
		for j < len(all) && all[j].tenant == all[i].tenant && gone(all[j]) {
			rowsGone = rowsGone || (all[j].kind != chain.KindPruned && all[j].kind != chain.KindCut)
			j++
		}
		if j > i && rowsGone {
			// Entries i..j-1 of this tenant are gone: the chain starts at j
			// (or after the last one, when every entry went).
			startSeq, startPrev := all[j-1].seq+1, []byte(nil)
			if j < len(all) && all[j].tenant == all[i].tenant {
				startSeq, startPrev = all[j].seq, all[j].prev
			} else {
				var h []byte
				if err := tx.QueryRowContext(ctx, `SELECT hash FROM chain WHERE tenant = ? AND seq = ?`, all[j-1].tenant, all[j-1].seq).Scan(&h); err != nil {
					return 0, nil, err
				}
				startPrev = h
			}
			for _, e := range all[i:j] {
				if _, err := tx.ExecContext(ctx, `DELETE FROM chain WHERE tenant = ? AND seq = ?`, e.tenant, e.seq); err != nil {
					return 0, nil, err
				}
				if _, err := tx.ExecContext(ctx, `DELETE FROM chain_pruned WHERE tenant = ? AND seq = ?`, e.tenant, e.seq); err != nil {
					return 0, nil, err
				}
				cut++
			}
			starts[all[i].tenant] = startSeq
			if _, err := tx.ExecContext(ctx, `INSERT INTO chain_cuts (tenant, seq, prev, before) VALUES (?, ?, ?, ?)
				ON CONFLICT (tenant) DO UPDATE SET seq = excluded.seq, prev = excluded.prev, before = excluded.before`,
				all[i].tenant, startSeq, startPrev, before); err != nil {
				return 0, nil, err
			}
			// The cut on record in the chain, after every entry a checkpoint
			// signed before it: verify tells a cut no checkpoint has been
			// made since (serve ran without its key) from one a later
			// checkpoint left out (review rev17c).
			if _, err := appendEntry(ctx, tx, chain.Entry{Tenant: all[i].tenant, Kind: chain.KindCut, First: startSeq, Last: startSeq,
				Digest: chain.CutDigest(startSeq, startPrev, before), Time: now}); err != nil {
				return 0, nil, err
			}
		}
		// Skip the rest of this tenant: only a prefix can be cut.
		t := all[i].tenant
		for i < len(all) && all[i].tenant == t {
			i++
		}
	}
	return cut, starts, nil
}

// entryOf returns the seq of tenant's entry of kind that covers row (a
// call or change row id); 0 when none.
func entryOf(ctx context.Context, q queryer, tenant, kind string, row int64) (int64, error) {
	var seq int64
	var first int64
	err := q.QueryRowContext(ctx, `SELECT seq, first FROM chain WHERE tenant = ? AND kind = ? AND last >= ?
		ORDER BY last LIMIT 1`, tenant, kind, row).Scan(&seq, &first)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && first > row) {
		return 0, nil
	}
	return seq, err
}

// adoptHistory chains what a store of schema 2 holds, which had no chain:
// per tenant, one entry for its calls, one for its findings and one for
// its finding state changes, as they are when migrated.
func adoptHistory(tx *sql.Tx) error {
	ctx := context.Background()
	now := time.Now()
	names := map[int64]string{0: ""}
	rows, err := tx.Query(`SELECT id, s FROM strs`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id int64
		var s string
		if err := rows.Scan(&id, &s); err != nil {
			rows.Close()
			return err
		}
		names[id] = s
	}
	rows.Close()
	calls := map[string][]rowHash{}
	rows, err = tx.Query(`SELECT rid, id, tenant, time, rec FROM calls ORDER BY rid`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var rid, tenant, t int64
		var id any
		var rec []byte
		if err := rows.Scan(&rid, &id, &tenant, &t, &rec); err != nil {
			rows.Close()
			return err
		}
		tn := names[tenant]
		calls[tn] = append(calls[tn], rowHash{row: rid, hash: callHash(rid, id, tn, t, rec)})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if err := chainCalls(ctx, tx, calls, now); err != nil {
		return err
	}
	fs, err := loadFindings(ctx, tx)
	if err != nil {
		return err
	}
	byTenant := map[string][]rowHash{}
	for i := range fs {
		byTenant[fs[i].tenant] = append(byTenant[fs[i].tenant], rowHash{id: idBytes(fs[i].id), hash: findingHash(&fs[i].findingRow)})
	}
	for _, tenant := range sortedKeys(byTenant) {
		seq, err := appendEntry(ctx, tx, chain.Entry{Tenant: tenant, Kind: chain.KindFindings, N: int64(len(byTenant[tenant])),
			Digest: findingsDigest(byTenant[tenant]), Time: now})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(`UPDATE findings SET chain = ? WHERE tenant = ?`, seq, tenant); err != nil {
			return err
		}
	}
	var hasChanges int
	if err := tx.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = 'finding_changes'`).Scan(&hasChanges); err != nil || hasChanges == 0 {
		return err
	}
	changes, err := loadChanges(ctx, tx)
	if err != nil {
		return err
	}
	for _, tenant := range sortedKeys(changes) {
		cs := changes[tenant]
		hs := make([]chain.Hash, len(cs))
		for i := range cs {
			hs[i] = cs[i].hash
		}
		if _, err := appendEntry(ctx, tx, chain.Entry{Tenant: tenant, Kind: chain.KindChanges, First: cs[0].row,
			Last: cs[len(cs)-1].row, N: int64(len(cs)), Digest: chain.Digest(hs), Time: now}); err != nil {
			return err
		}
	}
	return nil
}

// storedFinding is a findings row as the chain hashes it, with its entry.
type storedFinding struct {
	findingRow
	chain int64
}

type rowsQueryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// loadFindings reads every findings row.
func loadFindings(ctx context.Context, q rowsQueryer) ([]storedFinding, error) {
	rows, err := q.QueryContext(ctx, `SELECT id, time, kind, severity, server, tenant, document, key, session, body, chain FROM findings`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []storedFinding
	for rows.Next() {
		var f storedFinding
		if err := rows.Scan(&f.id, &f.time, &f.kind, &f.severity, &f.server, &f.tenant, &f.doc, &f.key, &f.session, &f.body, &f.chain); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// loadChanges reads every finding state change, by tenant in seq order.
func loadChanges(ctx context.Context, q rowsQueryer) (map[string][]rowHash, error) {
	rows, err := q.QueryContext(ctx, `SELECT seq, fid, tenant, state, by, note, time FROM finding_changes ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]rowHash{}
	for rows.Next() {
		var seq, t int64
		var fid any
		var tenant, state, by, note string
		if err := rows.Scan(&seq, &fid, &tenant, &state, &by, &note, &t); err != nil {
			return nil, err
		}
		out[tenant] = append(out[tenant], rowHash{row: seq, hash: changeHash(seq, fid, tenant, state, by, note, t)})
	}
	return out, rows.Err()
}

// upgradeChainRecords adds, when missing, the columns that chain the
// answers kept aside (answers_late.chain) and the records of removed rows
// (chain_pruned.entry), without a schema version (review ch19), and chains
// what the store holds then: per tenant one answers entry for its answers
// aside, and one pruned entry per entry with records. Like a migration's
// adoption, that is protected from the upgrade on, not before. Done only
// when a column is added: a record or answer found later without its
// entry was not made by the collector. One transaction: a crash or ctx
// leaves the file as it was, and the next open does it again. Logged,
// with its count and time (review rev19c: a store of main held a record
// per call retention deleted behind a tenant's first finding change,
// millions, and this took a minute unsaid): the records of a group get
// their entry in one statement, not one each.
func upgradeChainRecords(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	tx, err := beginOpen(ctx, db)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	now := time.Now()
	var records, answers int
	if ok, err := hasColumn(ctx, tx, "chain_pruned", "entry"); err != nil {
		return err
	} else if !ok {
		if _, err := tx.ExecContext(ctx, `ALTER TABLE chain_pruned ADD COLUMN entry INTEGER NOT NULL DEFAULT 0`); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT tenant, seq, row, hash FROM chain_pruned`)
		if err != nil {
			return err
		}
		pr := pruning{}
		for rows.Next() {
			var tenant string
			var seq int64
			var row any
			var h []byte
			if err := rows.Scan(&tenant, &seq, &row, &h); err != nil {
				rows.Close()
				return err
			}
			pr.add(tenant, seq, row, chain.Hash(h))
			records++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if err := pr.chain(ctx, tx, now, func(k entryKey, _ []prunedRow, seq int64) error {
			_, err := tx.ExecContext(ctx, `UPDATE chain_pruned SET entry = ? WHERE tenant = ? AND seq = ?`, seq, k.tenant, k.seq)
			return err
		}); err != nil {
			return err
		}
	}
	if ok, err := hasColumn(ctx, tx, "answers_late", "chain"); err != nil {
		return err
	} else if !ok {
		if _, err := tx.ExecContext(ctx, `ALTER TABLE answers_late ADD COLUMN chain INTEGER NOT NULL DEFAULT 0`); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT tenant, id, time, rec FROM answers_late`)
		if err != nil {
			return err
		}
		kept := map[string][]keptAnswer{}
		for rows.Next() {
			var tenant string
			var id any
			var t int64
			var rec []byte
			if err := rows.Scan(&tenant, &id, &t, &rec); err != nil {
				rows.Close()
				return err
			}
			kept[tenant] = append(kept[tenant], keptAnswer{id: id, hash: answerHash(id, tenant, t, rec)})
			answers++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if err := chainAnswers(ctx, tx, kept, now); err != nil {
			return err
		}
	}
	if err := commitOpen(ctx, tx); err != nil {
		return err
	}
	if records > 0 || answers > 0 {
		log.Info("chained the records of removed rows and the answers kept aside of a store written before them (first open by this release)",
			"records", records, "answers", answers, "elapsed", time.Since(now).Round(time.Millisecond))
	}
	return nil
}

// hasColumn reports whether table has column.
func hasColumn(ctx context.Context, q rowsQueryer, table, column string) (bool, error) {
	rows, err := q.QueryContext(ctx, `SELECT 1 FROM pragma_table_info(?) WHERE name = ?`, table, column)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	ok := rows.Next()
	return ok, rows.Err()
}
