package sqlite

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"fmt"
	"sort"
	"time"

	"github.com/mcpaudit/mcpaudit/exporter/chain"
)

// Verify checks the store at path against its tamper-evidence chains and,
// with pub, their signed checkpoints, reading the file only (a collector
// may be writing it meanwhile: the check reads one snapshot). A call log
// (ack "log") that no process holds is applied to the file first, so that
// the calls it acknowledged are checked too. Every edit,
// deletion, insertion or reordering of stored calls, findings and finding
// state changes is reported with its tenant, chain entry and rows. An
// error means the check could not run.
func Verify(ctx context.Context, path string, pub ed25519.PublicKey) (*chain.Report, error) {
	if err := applyLog(path); err != nil {
		return nil, fmt.Errorf("cannot verify store %s: %w", path, err)
	}
	db, err := openReadOnly(path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("cannot read store %s: %w", path, err)
	}
	defer tx.Rollback()
	var version int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return nil, fmt.Errorf("cannot read store %s: %w", path, err)
	}
	if version != schemaVersion {
		return nil, fmt.Errorf("cannot verify store %s: schema version %d, want %d (open it with serve once to migrate it)", path, version, schemaVersion)
	}
	v := verifier{ctx: ctx, tx: tx, r: &chain.Report{}}
	if err := v.run(pub); err != nil {
		return nil, fmt.Errorf("cannot verify store %s: %w", path, err)
	}
	return v.r, nil
}

type verifier struct {
	ctx context.Context
	tx  *sql.Tx
	r   *chain.Report

	entries map[string][]*vEntry // by tenant, in seq order
	bySeq   map[string]map[int64]*vEntry
	cuts    map[string]chain.Cut
	pruned  map[entryKey]map[string]chain.Hash // row key → hash
}

type entryKey struct {
	tenant string
	seq    int64
}

type vEntry struct {
	chain.Entry
	hash chain.Hash // as stored
	rows []rowHash  // found in the tables
}

func (e *vEntry) where() string {
	switch e.Kind {
	case chain.KindFindings:
		return fmt.Sprintf("chain entry %d (%s, committed %s)", e.Seq, chain.Count(e.N, "finding", "findings"), e.Time.UTC().Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("chain entry %d (%s %s, committed %s)", e.Seq, e.Kind, chain.Span("row", "rows", e.First, e.Last), e.Time.UTC().Format(time.RFC3339Nano))
}

func rowKey(row any) string {
	switch v := row.(type) {
	case int64:
		return fmt.Sprintf("#%d", v)
	case []byte:
		return string(v)
	}
	return fmt.Sprint(row)
}

func (v *verifier) run(pub ed25519.PublicKey) error {
	if err := v.loadChain(); err != nil {
		return err
	}
	v.checkLinks()
	if err := v.checkCalls(); err != nil {
		return err
	}
	if err := v.checkFindings(); err != nil {
		return err
	}
	if err := v.checkChanges(); err != nil {
		return err
	}
	v.checkDigests()
	return v.checkCheckpoints(pub)
}

func (v *verifier) loadChain() error {
	v.entries, v.bySeq, v.pruned = map[string][]*vEntry{}, map[string]map[int64]*vEntry{}, map[entryKey]map[string]chain.Hash{}
	rows, err := v.tx.QueryContext(v.ctx, `SELECT tenant, seq, kind, first, last, n, digest, prev, hash, time FROM chain ORDER BY tenant, seq`)
	if err != nil {
		return err
	}
	for rows.Next() {
		e := &vEntry{}
		var digest, prev, hash []byte
		var t int64
		if err := rows.Scan(&e.Tenant, &e.Seq, &e.Kind, &e.First, &e.Last, &e.N, &digest, &prev, &hash, &t); err != nil {
			rows.Close()
			return err
		}
		copy(e.Digest[:], digest)
		copy(e.Prev[:], prev)
		copy(e.hash[:], hash)
		e.Time = time.Unix(0, t)
		v.entries[e.Tenant] = append(v.entries[e.Tenant], e)
		if v.bySeq[e.Tenant] == nil {
			v.bySeq[e.Tenant] = map[int64]*vEntry{}
		}
		v.bySeq[e.Tenant][e.Seq] = e
		v.r.Entries++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	v.r.Tenants = int64(len(v.entries))
	if v.cuts, err = loadCuts(v.ctx, v.tx); err != nil {
		return err
	}
	rows, err = v.tx.QueryContext(v.ctx, `SELECT tenant, seq, row, hash FROM chain_pruned`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k entryKey
		var row any
		var h []byte
		if err := rows.Scan(&k.tenant, &k.seq, &row, &h); err != nil {
			return err
		}
		if v.pruned[k] == nil {
			v.pruned[k] = map[string]chain.Hash{}
		}
		v.pruned[k][rowKey(row)] = chain.Hash(h)
	}
	return rows.Err()
}

// checkLinks checks each tenant's chain: consecutive seqs, each entry's
// hash, and each prev naming the entry before (or the cut).
func (v *verifier) checkLinks() {
	for tenant, es := range v.entries {
		var want int64 = 1
		var prev chain.Hash
		if c, ok := v.cuts[tenant]; ok {
			want = c.Seq
			prev, _ = chain.ParseHash(c.Prev)
		}
		for _, e := range es {
			if e.Seq != want {
				v.r.Add(tenant, e.where(), "%s", chain.MissingEntries(want, e.Seq-1))
			} else if e.Prev != prev {
				v.r.Add(tenant, e.where(), "its previous hash does not name entry %d: the chain was rewritten or reordered here", e.Seq-1)
			}
			if e.Entry.Hash() != e.hash {
				v.r.Add(tenant, e.where(), "the entry itself was edited: its hash does not match its fields")
			}
			want, prev = e.Seq+1, e.hash
		}
	}
}

// checkCalls reads every call in row order and gives it to the entry of
// its tenant that covers its row id.
func (v *verifier) checkCalls() error {
	type cursor struct {
		es []*vEntry
		i  int
	}
	calls := map[string]*cursor{}
	for tenant, es := range v.entries {
		c := &cursor{}
		for _, e := range es {
			if e.Kind == chain.KindCalls {
				c.es = append(c.es, e)
			}
		}
		calls[tenant] = c
	}
	rows, err := v.tx.QueryContext(v.ctx, `SELECT rid, id, coalesce((SELECT s FROM strs WHERE strs.id = calls.tenant), ''), time, rec
		FROM calls ORDER BY rid`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var rid, t int64
		var id any
		var tenant string
		var rec []byte
		if err := rows.Scan(&rid, &id, &tenant, &t, &rec); err != nil {
			return err
		}
		v.r.Calls++
		c := calls[tenant]
		for c != nil && c.i < len(c.es) && c.es[c.i].Last < rid {
			c.i++
		}
		if c == nil || c.i == len(c.es) || c.es[c.i].First > rid {
			v.r.Add(tenant, fmt.Sprintf("call row %d (id %s, time %s)", rid, unpackID(callPrefix, id), fromNanos(t).Format(time.RFC3339Nano)),
				"in no chain entry of its tenant: inserted outside the collector, or moved to another tenant")
			continue
		}
		e := c.es[c.i]
		e.rows = append(e.rows, rowHash{row: rid, hash: callHash(rid, id, tenant, t, rec)})
	}
	return rows.Err()
}

func (v *verifier) checkFindings() error {
	fs, err := loadFindings(v.ctx, v.tx)
	if err != nil {
		return err
	}
	for i := range fs {
		f := &fs[i]
		v.r.Findings++
		e := v.bySeq[f.tenant][f.chain]
		if e == nil || e.Kind != chain.KindFindings {
			v.r.Add(f.tenant, "finding "+unpackID(findingPrefix, f.id), "names chain entry %d, which holds no findings of its tenant: inserted outside the collector", f.chain)
			continue
		}
		e.rows = append(e.rows, rowHash{id: idBytes(f.id), hash: findingHash(&f.findingRow)})
	}
	return nil
}

func (v *verifier) checkChanges() error {
	var n int
	if err := v.tx.QueryRowContext(v.ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'finding_changes'`).Scan(&n); err != nil || n == 0 {
		return err
	}
	changes, err := loadChanges(v.ctx, v.tx)
	if err != nil {
		return err
	}
	for tenant, cs := range changes {
		var es []*vEntry
		for _, e := range v.entries[tenant] {
			if e.Kind == chain.KindChanges {
				es = append(es, e)
			}
		}
		i := 0
		for _, c := range cs {
			v.r.Changes++
			for i < len(es) && es[i].Last < c.row {
				i++
			}
			if i == len(es) || es[i].First > c.row {
				v.r.Add(tenant, fmt.Sprintf("finding change %d", c.row), "in no chain entry of its tenant: inserted outside the collector")
				continue
			}
			es[i].rows = append(es[i].rows, c)
		}
	}
	return nil
}

// checkDigests compares what each entry holds (rows found, and rows
// retention removed) with its count and digest.
func (v *verifier) checkDigests() {
	for tenant, es := range v.entries {
		for _, e := range es {
			pruned := v.pruned[entryKey{tenant, e.Seq}]
			rows := e.rows
			for k, h := range pruned {
				r := rowHash{hash: h}
				if e.Kind == chain.KindFindings {
					r.id = []byte(k)
				} else {
					fmt.Sscanf(k, "#%d", &r.row)
				}
				rows = append(rows, r)
			}
			var digest chain.Hash
			if e.Kind == chain.KindFindings {
				digest = findingsDigest(rows)
			} else {
				sort.Slice(rows, func(i, j int) bool { return rows[i].row < rows[j].row })
				hs := make([]chain.Hash, len(rows))
				for i := range rows {
					hs[i] = rows[i].hash
				}
				digest = chain.Digest(hs)
			}
			switch {
			case int64(len(rows)) < e.N:
				v.r.Add(tenant, e.where(), "%s recorded, %d found: rows deleted%s", chain.Count(e.N, "row", "rows"), len(rows), v.missing(e, rows))
			case int64(len(rows)) > e.N:
				v.r.Add(tenant, e.where(), "%s recorded, %d found: rows inserted", chain.Count(e.N, "row", "rows"), len(rows))
			case digest != e.Digest:
				v.r.Add(tenant, e.where(), "its rows' contents differ from what was chained: a row was edited, or rows swapped%s", changed(rows))
			}
		}
	}
}

// missing names the row ids of an entry's range that no table holds and
// retention did not record: the rows deleted.
func (v *verifier) missing(e *vEntry, rows []rowHash) string {
	if e.Kind == chain.KindFindings {
		return ""
	}
	table := "calls"
	col := "rid"
	if e.Kind == chain.KindChanges {
		table, col = "finding_changes", "seq"
	}
	present := map[int64]bool{}
	qr, err := v.tx.QueryContext(v.ctx, `SELECT `+col+` FROM `+table+` WHERE `+col+` BETWEEN ? AND ?`, e.First, e.Last)
	if err != nil {
		return ""
	}
	defer qr.Close()
	for qr.Next() {
		var r int64
		if qr.Scan(&r) == nil {
			present[r] = true
		}
	}
	for _, r := range rows {
		present[r.row] = true
	}
	var gone []int64
	for r := e.First; r <= e.Last && len(gone) < 20; r++ {
		if !present[r] {
			gone = append(gone, r)
		}
	}
	if len(gone) == 0 {
		return ""
	}
	if len(gone) == 1 {
		return fmt.Sprintf(" (row %v gone)", gone)
	}
	return fmt.Sprintf(" (rows %v gone)", gone)
}

func changed(rows []rowHash) string {
	if len(rows) == 0 {
		return ""
	}
	if rows[0].id != nil {
		return ""
	}
	return " (" + chain.Span("row", "rows", rows[0].row, rows[len(rows)-1].row) + ")"
}

// checkCheckpoints checks the signatures and that the chains still pass
// through every signed head, and that every cut was signed.
func (v *verifier) checkCheckpoints(pub ed25519.PublicKey) error {
	rows, err := v.tx.QueryContext(v.ctx, `SELECT seq, body, sig FROM checkpoints ORDER BY seq`)
	if err != nil {
		return err
	}
	var cps []chain.Checkpoint
	for rows.Next() {
		var c chain.Checkpoint
		if err := rows.Scan(&c.Seq, &c.Body, &c.Sig); err != nil {
			rows.Close()
			return err
		}
		cps = append(cps, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	v.r.Checkpoints = int64(len(cps))
	if pub == nil {
		v.r.Note("no public key given: the chains were checked against themselves, not against signed checkpoints; anyone who can write the file can rewrite a chain whole")
		return nil
	}
	if len(cps) == 0 {
		if v.r.Entries > 0 {
			v.r.Add("*", "checkpoints", "none is stored, though the chains hold %s: the store was written without a signing key, or its checkpoints were deleted", chain.Count(v.r.Entries, "entry", "entries"))
		}
		return nil
	}
	signedCuts := map[string][]chain.Cut{}
	signed := map[string]int64{} // tenant → the latest signed seq
	for _, c := range cps {
		where := fmt.Sprintf("checkpoint %d", c.Seq)
		body, err := c.Open(pub)
		if err != nil {
			v.r.Add("*", where, "its signature does not verify with the given public key: forged, altered, or signed by another key")
			continue
		}
		for _, cut := range body.Cuts {
			signedCuts[cut.Tenant] = append(signedCuts[cut.Tenant], cut)
		}
		for _, h := range body.Heads {
			signed[h.Tenant] = max(signed[h.Tenant], h.Seq)
			e := v.bySeq[h.Tenant][h.Seq]
			if e == nil {
				if cut, ok := v.cuts[h.Tenant]; ok && cut.Seq > h.Seq {
					continue // cut by retention since
				}
				v.r.Add(h.Tenant, where, "signed chain entry %d, which is gone", h.Seq)
				continue
			}
			if e.hash.String() != h.Hash {
				v.r.Add(h.Tenant, where+" at "+body.Time.UTC().Format(time.RFC3339), "signed entry %d with another hash: the history up to it was rewritten", h.Seq)
			}
		}
		// A checkpoint's heads reach back to every earlier head: the
		// chain links between them are checked by checkLinks.
	}
	for tenant, cut := range v.cuts {
		ok := false
		for _, s := range signedCuts[tenant] {
			if s.Seq == cut.Seq && s.Prev == cut.Prev {
				ok = true
			}
		}
		if !ok {
			v.r.Add(tenant, fmt.Sprintf("the cut before entry %d", cut.Seq), "no checkpoint signed it: history was removed outside retention")
		}
	}
	for tenant, es := range v.entries {
		if last := es[len(es)-1].Seq; last > signed[tenant] {
			v.r.Note("tenant %q: %s", tenant, chain.UnsignedEntries(signed[tenant]+1, last))
		}
	}
	return nil
}
