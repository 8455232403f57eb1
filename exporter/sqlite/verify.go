package sqlite

import (
	"context"
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
func Verify(ctx context.Context, path string, keys chain.Keys) (*chain.Report, error) {
	return VerifyLogged(ctx, path, keys, nil)
}

// VerifyLogged is Verify of a store that keeps its calls in call logs
// (Calls "log"): openLogs opens them (read alone, beside a running serve),
// once the store's snapshot is taken, and every block on disk is hashed
// again and compared with the blocks the chain records (checkBlocks); the
// chained cuts of the logs are read again once they are open, so that a
// retention pass run in between is no tampering. Logs that openLogs finds
// empty, while the chain records blocks, are every block missing. With
// openLogs nil the block records are checked against the chain alone.
func VerifyLogged(ctx context.Context, path string, keys chain.Keys, openLogs func() (BlockLog, error)) (*chain.Report, error) {
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
	v := verifier{ctx: ctx, path: path, tx: tx, r: &chain.Report{}, openLogs: openLogs}
	if err := v.run(keys); err != nil {
		return nil, fmt.Errorf("cannot verify store %s: %w", path, err)
	}
	return v.r, nil
}

type verifier struct {
	ctx  context.Context
	path string // the store's file: laterLogCuts reads it again
	tx   *sql.Tx
	r    *chain.Report

	entries map[string][]*vEntry // by tenant, in seq order
	bySeq   map[string]map[int64]*vEntry
	cuts    map[string]chain.Cut
	pruned  map[entryKey]map[string]chain.Hash // row key → hash
	// records are the rows of chain_pruned, each with the pruned entry
	// that covers it; recordsChained is false in a store whose
	// chain_pruned has no entry column yet (not opened by this release).
	records        []vRecord
	recordsChained bool
	cutBefore      map[string]int64 // the cuts' cutoffs as stored
	// openLogs opens the call logs whose blocks the chain records (nil:
	// none to read).
	openLogs func() (BlockLog, error)
}

// vRecord is a row of chain_pruned: a removed row of entry seq, covered
// by the pruned entry entry.
type vRecord struct {
	tenant     string
	seq, entry int64
	row        any
	hash       chain.Hash
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
	committed := e.Time.UTC().Format(time.RFC3339Nano)
	switch e.Kind {
	case chain.KindAnswers:
		return fmt.Sprintf("chain entry %d (%s kept aside, committed %s)", e.Seq, chain.Count(e.N, "answer", "answers"), committed)
	case chain.KindPruned:
		return fmt.Sprintf("chain entry %d (the records of %s removed from entry %d, committed %s)", e.Seq, chain.Count(e.N, "row", "rows"), e.First, committed)
	case chain.KindCut:
		return fmt.Sprintf("chain entry %d (a retention cut before entry %d, committed %s)", e.Seq, e.First, committed)
	case chain.KindBlocks:
		return fmt.Sprintf("chain entry %d (%s of the call log, %s, committed %s)", e.Seq, chain.Count(e.N, "block", "blocks"),
			chain.Span("segment", "segments", e.First, e.Last), committed)
	case chain.KindLogCut:
		return fmt.Sprintf("chain entry %d (a retention cut of the call log before %s, committed %s)", e.Seq,
			fromNanos(e.First).UTC().Format(time.RFC3339Nano), committed)
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

func (v *verifier) run(keys chain.Keys) error {
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
	if err := v.checkAnswers(); err != nil {
		return err
	}
	v.checkDigests()
	v.checkRecords()
	if err := v.checkBlocks(); err != nil {
		return err
	}
	return v.checkCheckpoints(keys)
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
	v.cutBefore = map[string]int64{}
	rows, err = v.tx.QueryContext(v.ctx, `SELECT tenant, before FROM chain_cuts`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var tenant string
		var before int64
		if err := rows.Scan(&tenant, &before); err != nil {
			rows.Close()
			return err
		}
		v.cutBefore[tenant] = before
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if v.recordsChained, err = hasColumn(v.ctx, v.tx, "chain_pruned", "entry"); err != nil {
		return err
	}
	q := `SELECT tenant, seq, row, hash, 0 FROM chain_pruned`
	if v.recordsChained {
		q = `SELECT tenant, seq, row, hash, entry FROM chain_pruned`
	}
	rows, err = v.tx.QueryContext(v.ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var r vRecord
		var h []byte
		if err := rows.Scan(&r.tenant, &r.seq, &r.row, &h, &r.entry); err != nil {
			return err
		}
		r.hash = chain.Hash(h)
		v.records = append(v.records, r)
		k := entryKey{r.tenant, r.seq}
		if v.pruned[k] == nil {
			v.pruned[k] = map[string]chain.Hash{}
		}
		v.pruned[k][rowKey(r.row)] = r.hash
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

// checkAnswers gives each answer kept aside (answers_late) to the answers
// entry it names.
func (v *verifier) checkAnswers() error {
	var n int
	if err := v.tx.QueryRowContext(v.ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'answers_late'`).Scan(&n); err != nil || n == 0 {
		return err
	}
	chained, err := hasColumn(v.ctx, v.tx, "answers_late", "chain")
	if err != nil {
		return err
	}
	if !chained {
		if v.hasKind(chain.KindAnswers) {
			v.r.Add("*", "answers_late", "its chain column is gone, though the chains hold answers entries: the table was rebuilt outside the collector")
			return nil
		}
		var rows int64
		if err := v.tx.QueryRowContext(v.ctx, `SELECT count(*) FROM answers_late`).Scan(&rows); err != nil {
			return err
		}
		if rows > 0 {
			v.r.Note("%s kept aside not chained: the store was not opened by a release that chains them yet (serve's next start does)", chain.Count(rows, "answer", "answers"))
		}
		return nil
	}
	rows, err := v.tx.QueryContext(v.ctx, `SELECT tenant, id, time, rec, chain FROM answers_late`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var tenant string
		var id any
		var t, seq int64
		var rec []byte
		if err := rows.Scan(&tenant, &id, &t, &rec, &seq); err != nil {
			return err
		}
		e := v.bySeq[tenant][seq]
		if e == nil || e.Kind != chain.KindAnswers {
			v.r.Add(tenant, fmt.Sprintf("the answer kept aside of call %s (time %s)", unpackID(callPrefix, id), fromNanos(t).Format(time.RFC3339Nano)),
				"names chain entry %d, which holds no answers of its tenant: inserted outside the collector", seq)
			continue
		}
		e.rows = append(e.rows, rowHash{id: idBytes(id), hash: answerHash(id, tenant, t, rec)})
	}
	return rows.Err()
}

// hasKind reports whether any chain holds an entry of kind.
func (v *verifier) hasKind(kind string) bool {
	for _, es := range v.entries {
		for _, e := range es {
			if e.Kind == kind {
				return true
			}
		}
	}
	return false
}

// checkRecords checks the records of removed rows (chain_pruned) against
// the pruned entries that cover them: each record names its pruned entry,
// which counts and digests the records of its group. A record no pruned
// entry covers is a deletion made to look like retention's or an
// answer's. A pruned entry of an entry retention cut has no records left:
// they went with the entry.
func (v *verifier) checkRecords() {
	if !v.recordsChained {
		if v.hasKind(chain.KindPruned) {
			v.r.Add("*", "chain_pruned", "its entry column is gone, though the chains hold pruned entries: the table was rebuilt outside the collector")
		} else if len(v.records) > 0 {
			v.r.Note("%s of removed rows not chained: the store was not opened by a release that chains them yet (serve's next start does)",
				chain.Count(len(v.records), "record", "records"))
		}
		return
	}
	groups := map[entryKey][]vRecord{}
	for _, r := range v.records {
		k := entryKey{r.tenant, r.entry}
		groups[k] = append(groups[k], r)
	}
	for k, rs := range groups {
		e := v.bySeq[k.tenant][k.seq]
		if e != nil && e.Kind == chain.KindPruned {
			continue
		}
		for _, r := range rs {
			v.r.Add(r.tenant, fmt.Sprintf("the record of %s removed from chain entry %d", recordRow(r.row), r.seq),
				"no pruned entry covers it (it names entry %d): a deletion made to look like retention's or an answer's", r.entry)
		}
	}
	for tenant, es := range v.entries {
		cutSeq := int64(0)
		if c, ok := v.cuts[tenant]; ok {
			cutSeq = c.Seq
		}
		for _, e := range es {
			if e.Kind != chain.KindPruned {
				continue
			}
			rs := groups[entryKey{tenant, e.Seq}]
			if len(rs) == 0 && e.First < cutSeq {
				continue // the entry it recorded rows of was cut, with them
			}
			rows := make([]prunedRow, 0, len(rs))
			other := false
			for _, r := range rs {
				other = other || r.seq != e.First
				rows = append(rows, prunedRow{row: r.row, hash: r.hash})
			}
			switch {
			case int64(len(rows)) < e.N:
				v.r.Add(tenant, e.where(), "%s recorded, %d found: records of removed rows deleted", chain.Count(e.N, "record", "records"), len(rows))
			case int64(len(rows)) > e.N:
				v.r.Add(tenant, e.where(), "%s recorded, %d found: records inserted", chain.Count(e.N, "record", "records"), len(rows))
			case other:
				v.r.Add(tenant, e.where(), "a record covered by it names another entry: records moved")
			case prunedDigest(rows) != e.Digest:
				v.r.Add(tenant, e.where(), "its records' contents differ from what was chained: a record was edited")
			}
		}
	}
}

// recordRow names the row of a chain_pruned record.
func recordRow(row any) string {
	if rid, ok := row.(int64); ok {
		return fmt.Sprintf("row %d", rid)
	}
	if b, ok := row.([]byte); ok && len(b) > 1 {
		if seg, blk, ok := parseBlockRow(b); ok {
			return fmt.Sprintf("block %d of call log segment %d", blk, seg)
		}
		switch b[0] {
		case 'b':
			return "packed id " + unpackID("", b[1:])
		case 't':
			return "id " + string(b[1:])
		}
	}
	return fmt.Sprintf("row %v", row)
}

// checkDigests compares what each entry holds (rows found, and rows
// retention removed) with its count and digest.
func (v *verifier) checkDigests() {
	for tenant, es := range v.entries {
		for _, e := range es {
			if e.Kind == chain.KindPruned || e.Kind == chain.KindCut || e.Kind == chain.KindBlocks || e.Kind == chain.KindLogCut {
				continue // checkRecords, checkCheckpoints, checkBlocks
			}
			byID := e.Kind == chain.KindFindings || e.Kind == chain.KindAnswers
			pruned := v.pruned[entryKey{tenant, e.Seq}]
			rows := e.rows
			for k, h := range pruned {
				r := rowHash{hash: h}
				if byID {
					r.id = []byte(k)
				} else {
					fmt.Sscanf(k, "#%d", &r.row)
				}
				rows = append(rows, r)
			}
			var digest chain.Hash
			if byID {
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
	if e.Kind == chain.KindAnswers {
		return " (answers kept aside, acknowledged to their senders, are gone)"
	}
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

// cutEntry returns the last cut entry of tenant's chain that records cut
// (its start, that start's prev and the cutoff), or nil.
func (v *verifier) cutEntry(tenant string, cut chain.Cut) *vEntry {
	prev, err := chain.ParseHash(cut.Prev)
	if err != nil {
		return nil
	}
	before, ok := v.cutBefore[tenant]
	if !ok {
		return nil
	}
	es := v.entries[tenant]
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		if e.Kind == chain.KindCut && e.First == cut.Seq && e.Digest == chain.CutDigest(cut.Seq, prev[:], before) {
			return e
		}
	}
	return nil
}

// checkCheckpoints checks the signatures and that the chains still pass
// through every signed head, and that every cut was signed.
func (v *verifier) checkCheckpoints(keys chain.Keys) error {
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
	if len(keys) == 0 {
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
	signers := chain.NewSigners(keys)
	defer signers.Note(v.r)
	unverified := 0
	for _, c := range cps {
		where := fmt.Sprintf("checkpoint %d", c.Seq)
		body, key, err := keys.Open(&c)
		if err != nil {
			v.r.Add("*", where, "%s", chain.BadSignature(keys, err))
			unverified++
			continue
		}
		if p := signers.Add(key, "", c.Seq); p != "" {
			v.r.Add("*", where, "%s", p)
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
		if ok {
			continue
		}
		where := fmt.Sprintf("the cut before entry %d", cut.Seq)
		// A cut no checkpoint signed: retention's while serve ran without
		// its signing key (review rev17c), or a removal. Retention puts a
		// cut entry in the chain; a keyed serve signs every cut at its next
		// checkpoint. So a cut whose entry a checkpoint signed past was
		// left out by it: a removal; one without its entry was not made by
		// retention; one made after the last checkpoint cannot be told from
		// a removal by someone who can write the file, and is said so.
		e := v.cutEntry(tenant, cut)
		switch {
		case e == nil:
			v.r.Add(tenant, where, "no checkpoint signed it, and no cut entry of the chain records it: history was removed outside retention")
		case e.Seq <= 1:
			// Retention appends a cut entry after the entries it cuts, so
			// a chain never begins with one.
			v.r.Add(tenant, where, "no checkpoint signed it, and its cut entry is the first entry of its chain: a cut of a chain that held nothing, not retention's")
		case signed[tenant] >= e.Seq:
			v.r.Add(tenant, where, "no checkpoint signed it, though a checkpoint signed entry %d, after its cut entry %d: history was removed outside retention", signed[tenant], e.Seq)
		default:
			v.r.UnsignedCut(tenant, where, "(retention cutoff %s, recorded by chain entry %d) was made after the last checkpoint and no checkpoint signed it: "+
				"serve cuts so while it runs without its signing key, and someone who can write the file can too, so it cannot be told from a removal; "+
				"serve's next start with its key signs it (verify --key-always, when serve always had its key, reports it as a removal)", cut.Before.Format(time.RFC3339Nano), e.Seq)
		}
	}
	for tenant, es := range v.entries {
		if last := es[len(es)-1].Seq; last > signed[tenant] {
			v.r.Note("tenant %q: %s", tenant, chain.UnsignedEntries(signed[tenant]+1, last, unverified))
		}
	}
	return nil
}
