package clickhouse

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/mcpaudit/mcpaudit/exporter/chain"
)

// Tamper evidence (package chain, docs/storage.md): each collector replica
// keeps one hash chain per tenant in the chain table. ClickHouse has no
// transactions and no row ids, so an entry names its rows by a nonce that
// every row it covers carries in chain_entry, and lists their ids, content
// hashes and event times: verify finds each row's entry, compares its
// contents, and names a row deleted, edited or inserted by its id.
//
// A batch is chained just before it is inserted, under chainMu, which is
// held until the batch's chain rows are stored or the insert is given up:
// entries land in seq order, and the heads in memory are those stored. A
// batch given up (spooled, or left to the next drain) is chained again
// with a new nonce at its next insert; the rows an interrupted insert left
// carry the old nonce, and verify accepts them when an entry lists the same
// id with the same contents.

// chainRow is one stored chain entry.
type chainRow struct {
	Tenant, Replica string
	Seq             uint64
	Kind            string
	Nonce           uint64
	Digest, Prev    chain.Hash
	Hash            chain.Hash
	Time            time.Time
	Sums            []sum
	Times           []uint32
}

// sum is the hash of one stored row in its entry's list: the first 128
// bits of its SHA-256.
type sum [16]byte

// sumOf shortens a row hash.
func sumOf(h chain.Hash) sum { return sum(h[:16]) }

// entry returns the chain.Entry the row stands for.
func (r *chainRow) entry() chain.Entry {
	return chain.Entry{Tenant: r.Tenant, Replica: r.Replica, Seq: int64(r.Seq), Kind: r.Kind,
		First: int64(r.Nonce), N: int64(len(r.Sums)), Digest: r.Digest, Prev: r.Prev, Time: r.Time}
}

// digestOf hashes an entry's list of rows, in the order listed.
func digestOf(sums []sum, times []uint32) chain.Hash {
	hs := make([]chain.Hash, len(sums))
	for i := range sums {
		hs[i] = chain.RowHash(sums[i][:], chain.Int(int64(times[i])))
	}
	return chain.Digest(hs)
}

// head is where one tenant's chain of this replica stands.
type head struct {
	seq  uint64
	hash chain.Hash
}

// batchChain is the chain entries of one batch being inserted, and the
// heads they move the chains to.
type batchChain struct {
	rows  []chainRow
	heads map[string]head
	done  bool // the chain rows are stored
}

// listSums returns the strings of ss, for a column.
func listSums(ss []sum) []string {
	out := make([]string, len(ss))
	for i := range ss {
		out[i] = string(ss[i][:])
	}
	return out
}

// strs returns the bytes RowHash takes for a list of strings.
func strs(ss []string) []byte {
	var b []byte
	for _, s := range ss {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}

// callSum hashes a stored call row: every column but version and
// chain_entry (set per insert).
func callSum(r *callRow) sum {
	return sumOf(chain.RowHash([]byte(r.ID), []byte(r.Tenant), []byte(r.Server), []byte(r.Document), chain.Int(r.Time),
		chain.Int(int64(r.TimeNanos)), strs(r.OtherDocuments), chain.Int(r.DurationNS), []byte(r.Session),
		[]byte(r.Client), []byte(r.TraceID), []byte(r.SpanID), []byte(r.Fingerprint), []byte(r.RPCID),
		[]byte(r.Method), []byte(r.Tool), []byte(r.ToolLabel), []byte(r.Arguments), []byte(r.Result),
		chain.Int(r.ErrorCode), []byte(r.ErrorMessage), []byte(r.ErrorData), []byte(r.TransportError),
		[]byte(r.Source), []byte(r.Outcome), []byte(r.FailureCode), []byte(r.FailureAction),
		[]byte(r.FailureMessage), []byte(r.Reading), chain.Int(int64(r.Flags))))
}

// findingSum hashes the stored contents of a finding row, as callSum.
func findingSum(r *findingRow) sum {
	return sumOf(chain.RowHash([]byte(r.ID), []byte(r.Tenant), []byte(r.Server), []byte(r.Document), chain.Int(r.Time),
		chain.Int(int64(r.TimeNanos)), []byte(r.Kind), []byte(r.Severity), []byte(r.Key), []byte(r.Session),
		strs(r.Calls), []byte(r.Reason), []byte(r.RetryAction), []byte(r.Summary)))
}

// changeRow is a stored finding state change.
type changeRow struct {
	Tenant, FindingID string
	Time              int64
	TimeNanos         uint32
	State, By, Note   string
	Chain             uint64
}

// id names a change: its finding and time (the table's key).
func (c *changeRow) id() string {
	return fmt.Sprintf("%s@%d.%09d", c.FindingID, c.Time, c.TimeNanos)
}

// changeSum hashes a stored finding state change.
func changeSum(c *changeRow) sum {
	return sumOf(chain.RowHash([]byte(c.Tenant), []byte(c.FindingID), chain.Int(c.Time), chain.Int(int64(c.TimeNanos)),
		[]byte(c.State), []byte(c.By), []byte(c.Note)))
}

// newNonce returns a random nonzero nonce (0 marks rows stored before the
// chain).
func newNonce() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:])
		if n := binary.BigEndian.Uint64(b[:]) >> 1; n != 0 {
			// Kept below 2^63: the entry's hash takes it as an int64.
			return n
		}
	}
}

// pending lists, per tenant in order of appearance, the rows of one kind
// an entry will cover.
type pending struct {
	tenants []string
	rows    map[string]*entryRows
}

type entryRows struct {
	sums  []sum
	times []uint32
	tag   []*uint64
}

func (p *pending) add(tenant string, s sum, t int64, tag *uint64) {
	if p.rows == nil {
		p.rows = map[string]*entryRows{}
	}
	e := p.rows[tenant]
	if e == nil {
		e = &entryRows{}
		p.rows[tenant] = e
		p.tenants = append(p.tenants, tenant)
	}
	e.sums = append(e.sums, s)
	e.times = append(e.times, uint32(t))
	e.tag = append(e.tag, tag)
}

// chainEntries appends, per tenant, one entry of kind covering p's rows to
// bc, tagging the rows with the entry's nonce.
func (s *Store) chainEntries(bc *batchChain, kind string, p *pending, now time.Time) {
	sort.Strings(p.tenants)
	for _, tenant := range p.tenants {
		rows := p.rows[tenant]
		h, ok := bc.heads[tenant]
		if !ok {
			h = s.heads[tenant]
		}
		r := chainRow{Tenant: tenant, Replica: s.opts.Replica, Seq: h.seq + 1, Kind: kind, Nonce: newNonce(),
			Prev: h.hash, Time: now, Sums: rows.sums, Times: rows.times}
		r.Digest = digestOf(r.Sums, r.Times)
		e := r.entry()
		r.Hash = e.Hash()
		for _, tag := range rows.tag {
			*tag = r.Nonce
		}
		bc.rows = append(bc.rows, r)
		bc.heads[tenant] = head{seq: r.Seq, hash: r.Hash}
	}
}

// chainBatch chains the calls and findings of b; the caller holds chainMu.
func (s *Store) chainBatch(b *batch) {
	now := time.Now()
	bc := &batchChain{heads: map[string]head{}}
	var calls, findings pending
	for i := range b.Calls {
		r := &b.Calls[i]
		calls.add(r.Tenant, callSum(r), r.Time, &r.Chain)
	}
	for i := range b.Findings {
		r := &b.Findings[i]
		findings.add(r.Tenant, findingSum(r), r.Time, &r.Chain)
	}
	s.chainEntries(bc, chain.KindCalls, &calls, now)
	s.chainEntries(bc, chain.KindFindings, &findings, now)
	b.chain = bc
}

// unchain forgets the chain entries of a batch whose insert was given up
// before they were stored: its next insert chains it again.
func (b *batch) unchain() {
	if b.chain == nil || b.chain.done {
		return
	}
	b.chain = nil
	for i := range b.Calls {
		b.Calls[i].Chain = 0
	}
	for i := range b.Findings {
		b.Findings[i].Chain = 0
	}
}

var chainColumns = []string{"tenant", "replica", "seq", "kind", "nonce", "n", "digest", "prev", "hash",
	"time", "time_nanos", "sums", "times"}

// insertChain stores the chain rows of b and moves the heads; the caller
// holds chainMu.
func (s *Store) insertChain(b *batch, retry bool) error {
	bc := b.chain
	if bc == nil || bc.done {
		return nil
	}
	rows := bc.rows
	if retry {
		// An earlier attempt may have stored them, or still be storing
		// them (awaitAbandoned).
		if !s.caps.DedupToken {
			if err := s.awaitAbandoned(); err != nil {
				return err
			}
		}
		stored, err := s.storedEntries(rows)
		if err != nil {
			return err
		}
		var keep []chainRow
		for _, r := range rows {
			if !stored[r.Tenant+"\x00"+fmt.Sprint(r.Seq)] {
				keep = append(keep, r)
			}
		}
		rows = keep
	}
	if len(rows) > 0 {
		one := func(int) (int, []any) { return len(rows), chainColumnValues(rows) }
		if err := s.insertBlocks(b.Token+":chain", "chain", chainColumns, len(rows), one); err != nil {
			return err
		}
	}
	bc.done = true
	for t, h := range bc.heads {
		s.heads[t] = h
	}
	return nil
}

// storedEntries returns which of rows (by tenant and seq) ClickHouse has.
func (s *Store) storedEntries(rows []chainRow) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.InsertTimeout)
	defer cancel()
	out := map[string]bool{}
	var conds []string
	for _, r := range rows {
		conds = append(conds, fmt.Sprintf("(tenant = %s AND seq = %d)", quote(r.Tenant), r.Seq))
	}
	if len(conds) == 0 {
		return out, nil
	}
	q := "SELECT tenant, seq FROM " + s.layout.DB + ".chain WHERE replica = " + quote(s.opts.Replica) + " AND (" + strings.Join(conds, " OR ") + ")"
	err := each(ctx, s.conn, "find stored chain entries", q, func(r driver.Rows) error {
		var t string
		var seq uint64
		if err := r.Scan(&t, &seq); err != nil {
			return err
		}
		out[t+"\x00"+fmt.Sprint(seq)] = true
		return nil
	})
	return out, classify(err)
}

func chainColumnValues(rows []chainRow) []any {
	return []any{
		col(rows, func(r *chainRow) string { return r.Tenant }),
		col(rows, func(r *chainRow) string { return r.Replica }),
		col(rows, func(r *chainRow) uint64 { return r.Seq }),
		col(rows, func(r *chainRow) string { return r.Kind }),
		col(rows, func(r *chainRow) uint64 { return r.Nonce }),
		col(rows, func(r *chainRow) uint64 { return uint64(len(r.Sums)) }),
		col(rows, func(r *chainRow) string { return string(r.Digest[:]) }),
		col(rows, func(r *chainRow) string { return string(r.Prev[:]) }),
		col(rows, func(r *chainRow) string { return string(r.Hash[:]) }),
		col(rows, func(r *chainRow) time.Time { return time.Unix(r.Time.Unix(), 0) }),
		col(rows, func(r *chainRow) uint32 { return uint32(r.Time.Nanosecond()) }),
		col(rows, func(r *chainRow) []string { return listSums(r.Sums) }),
		col(rows, func(r *chainRow) []uint32 { return r.Times }),
	}
}

// loadHeads reads where this replica's chains stand: the last entry of
// each tenant, or the cut when retention removed every entry.
func (s *Store) loadHeads(ctx context.Context) error {
	heads := map[string]head{}
	rep := quote(s.opts.Replica)
	q := "SELECT tenant, argMax(seq, version), argMax(prev, version) FROM " + s.layout.DB + ".chain_cuts WHERE replica = " + rep + " GROUP BY tenant"
	err := each(ctx, s.conn, "read the chain cuts", q, func(r driver.Rows) error {
		var t, prev string
		var seq uint64
		if err := r.Scan(&t, &seq, &prev); err != nil {
			return err
		}
		heads[t] = head{seq: seq - 1, hash: chain.Hash([]byte(prev))}
		return nil
	})
	if err != nil {
		return err
	}
	q = "SELECT tenant, max(seq), argMax(hash, seq) FROM " + s.layout.DB + ".chain WHERE replica = " + rep + " GROUP BY tenant"
	err = each(ctx, s.conn, "read the chain heads", q, func(r driver.Rows) error {
		var t, h string
		var seq uint64
		if err := r.Scan(&t, &seq, &h); err != nil {
			return err
		}
		if seq > heads[t].seq {
			heads[t] = head{seq: seq, hash: chain.Hash([]byte(h))}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var last uint64
	q = "SELECT max(seq) FROM " + s.layout.DB + ".checkpoints WHERE replica = " + rep
	if err := s.conn.QueryRow(ctx, q).Scan(&last); err != nil {
		return queryErr(ctx, "read the checkpoints", err)
	}
	s.chainMu.Lock()
	defer s.chainMu.Unlock()
	s.heads, s.checkpointSeq = heads, last
	if s.signable == nil {
		// The cuts found at the start are signed by its first checkpoint:
		// those a keyless serve made (docs/storage.md), and, unavoidably,
		// any written into the tables while no serve ran.
		cuts, err := s.readCuts(ctx, s.opts.Replica)
		if err != nil {
			return err
		}
		s.signable = map[cutID]bool{}
		for _, c := range cuts {
			s.signable[idOf(c)] = true
		}
	}
	return nil
}

// errNoKey is returned by checkpoint without a signing key.
var errNoKey = errors.New("no signing key")

// checkpoint signs this replica's heads and cuts when they changed since
// the last checkpoint of this process (or force); the caller holds chainMu.
func (s *Store) checkpoint(ctx context.Context, force bool) error {
	if s.opts.SigningKey == nil {
		return errNoKey
	}
	body := chain.Body{Replica: s.opts.Replica, Time: time.Now()}
	for t, h := range s.heads {
		if h.seq == 0 {
			continue
		}
		body.Heads = append(body.Heads, chain.Head{Tenant: t, Replica: s.opts.Replica, Seq: int64(h.seq), Hash: h.hash.String()})
	}
	cuts, err := s.readCuts(ctx, s.opts.Replica)
	if err != nil {
		return err
	}
	for _, c := range cuts {
		if s.signable[idOf(c)] {
			body.Cuts = append(body.Cuts, c)
			continue
		}
		// Not stored when this process started, and not made by it: a
		// keyed serve signs the cuts it makes at once, so this one was
		// written by someone else; left to verify, which reports it.
		s.log.Warn("clickhouse: a chain cut this replica did not make is left unsigned", "tenant", c.Tenant, "seq", c.Seq,
			"before", c.Before.Format(time.RFC3339))
	}
	// A replica's first checkpoint is made even with nothing to sign (the
	// store makes it when it starts), so that verify can tell a chain not
	// signed yet from checkpoints deleted.
	if len(body.Heads) == 0 && len(body.Cuts) == 0 && s.checkpointSeq > 0 {
		return nil
	}
	unstamped := body
	unstamped.Time = time.Time{}
	key := string(unstamped.Encode())
	if !force && key == s.lastSigned {
		return nil
	}
	cp := chain.Sign(int64(s.checkpointSeq+1), body, s.opts.SigningKey)
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.layout.DB+".checkpoints (replica, seq, time, body, sig)")
	if err != nil {
		return classify(fmt.Errorf("cannot store a checkpoint: %w", err))
	}
	if err := b.Append(s.opts.Replica, uint64(cp.Seq), body.Time, string(cp.Body), string(cp.Sig)); err != nil {
		b.Abort()
		return fmt.Errorf("cannot store a checkpoint: %w", err)
	}
	if err := b.Send(); err != nil {
		return classify(fmt.Errorf("cannot store a checkpoint: %w", err))
	}
	s.checkpointSeq++
	s.lastSigned = key
	return nil
}

// cutID names one cut: its tenant, start, that start's prev and cutoff.
type cutID struct {
	tenant string
	seq    int64
	prev   string
	before int64
}

func idOf(c chain.Cut) cutID { return cutID{c.Tenant, c.Seq, c.Prev, c.Before.Unix()} }

// readCuts returns the cuts in force of replica.
func (s *Store) readCuts(ctx context.Context, replica string) ([]chain.Cut, error) {
	return readCuts(ctx, s.conn, s.layout.DB, "WHERE replica = "+quote(replica))
}

// readCuts returns the cuts in force in db, filtered by where.
func readCuts(ctx context.Context, conn driver.Conn, db, where string) ([]chain.Cut, error) {
	var out []chain.Cut
	q := "SELECT tenant, replica, argMax(seq, version), argMax(prev, version), argMax(before, version) FROM " + db +
		".chain_cuts " + where + " GROUP BY tenant, replica ORDER BY tenant, replica"
	err := each(ctx, conn, "read the chain cuts", q, func(r driver.Rows) error {
		var c chain.Cut
		var seq uint64
		var prev string
		if err := r.Scan(&c.Tenant, &c.Replica, &seq, &prev, &c.Before); err != nil {
			return err
		}
		c.Seq, c.Prev, c.Before = int64(seq), chain.Hash([]byte(prev)).String(), c.Before.UTC()
		out = append(out, c)
		return nil
	})
	return out, err
}

// checkpointLoop signs the heads every CheckpointEvery while they move,
// until the store closes.
func (s *Store) checkpointLoop() {
	defer s.wg.Done()
	if s.opts.SigningKey == nil {
		return
	}
	t := time.NewTicker(s.opts.CheckpointEvery)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		s.signNow(false)
	}
}

// signNow makes a checkpoint when ClickHouse answers, logging a failure.
func (s *Store) signNow(force bool) {
	if !s.connected() || s.opts.SigningKey == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.InsertTimeout)
	defer cancel()
	s.chainMu.Lock()
	err := s.checkpoint(ctx, force)
	s.chainMu.Unlock()
	if err != nil {
		s.retries.Warn("checkpoint", "clickhouse: cannot sign a checkpoint; retrying at the next one", "err", err)
	}
}

// cutChains records, for every tenant of this replica whose rows retention
// removes before cutoff(tenant), where its chain now starts: the leading
// entries all of whose rows are older go, and the cut is signed before any
// row is deleted. Each cut is also put on record in the chain itself, by a
// cut entry appended before the cut is stored (chain_cuts): whether a
// checkpoint was made after the cut is then on record, so that verify can
// tell a cut made while serve ran without its key (after the last
// checkpoint: a note) from one a later checkpoint left out (review
// rev19c's D1; the embedded store does the same since ch19). One cut entry
// per tenant and retention pass: the commit path writes none. The caller
// holds chainMu.
func (s *Store) cutChains(ctx context.Context, cutoff func(tenant string) time.Time) error {
	tenants := make([]string, 0, len(s.heads))
	for t := range s.heads {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	type cutRow struct {
		tenant string
		seq    uint64
		prev   string
		before time.Time
	}
	var cuts []cutRow
	// A cut never moves its cutoff back (retention lengthened, a clock
	// set back): the rows older than the current one went with it, and an
	// earlier cutoff would stop excusing those of them in entries after
	// the start (review rev21c, TestRev21c_RetentionLengthened).
	current, err := s.readCuts(ctx, s.opts.Replica)
	if err != nil {
		return err
	}
	cutoffs := map[string]time.Time{}
	for _, c := range current {
		cutoffs[c.Tenant] = c.Before
	}
	for _, t := range tenants {
		before := cutoff(t)
		if before.IsZero() {
			continue
		}
		if c := cutoffs[t]; c.After(before) {
			before = c
		}
		// A cut entry covers no rows: it goes whenever the cut passes it.
		q := fmt.Sprintf("SELECT seq, prev, kind = %s, arrayReduce('max', times) < %d FROM %s.chain FINAL WHERE tenant = %s AND replica = %s ORDER BY seq",
			quote(chain.KindCut), before.Unix(), s.layout.DB, quote(t), quote(s.opts.Replica))
		start, prev, found, rows := uint64(0), "", false, false
		err := each(ctx, s.conn, "read the chain to cut", q, func(r driver.Rows) error {
			var seq uint64
			var p string
			var isCut, old uint8
			if err := r.Scan(&seq, &p, &isCut, &old); err != nil {
				return err
			}
			rows = rows || isCut == 0
			if found {
				return nil
			}
			if isCut == 0 && old == 0 {
				start, prev, found = seq, p, true
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !rows {
			// Cut entries alone: every row went at an earlier cut, which
			// stands; a new one at every pass would add a cut entry, a
			// checkpoint and a delete of the last cut entry for nothing.
			continue
		}
		if !found {
			// Every entry is older: the chain starts after its head.
			h := s.heads[t]
			start, prev = h.seq+1, string(h.hash[:])
		}
		cuts = append(cuts, cutRow{t, start, prev, before})
	}
	if len(cuts) == 0 {
		return nil
	}
	// The cut entries first: one whose cut is then not stored (a crash, an
	// outage) is an ordinary link, and the next pass cuts past it; a cut
	// stored without its entry would read as a removal.
	now := time.Now()
	entries := make([]chainRow, 0, len(cuts))
	heads := map[string]head{}
	for _, c := range cuts {
		h := s.heads[c.tenant]
		r := chainRow{Tenant: c.tenant, Replica: s.opts.Replica, Seq: h.seq + 1, Kind: chain.KindCut, Nonce: c.seq,
			Prev: h.hash, Time: now, Sums: []sum{}, Times: []uint32{},
			Digest: chain.CutDigest(int64(c.seq), []byte(c.prev), c.before.Unix())}
		e := r.entry()
		r.Hash = e.Hash()
		entries = append(entries, r)
		heads[c.tenant] = head{seq: r.Seq, hash: r.Hash}
	}
	if err := s.insertRows(ctx, "chain", chainColumns, chainColumnValues(entries)); err != nil {
		return fmt.Errorf("cannot record the chain cuts: %w", err)
	}
	for t, h := range heads {
		s.heads[t] = h
	}
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.layout.DB+".chain_cuts (tenant, replica, seq, prev, before, version)")
	if err != nil {
		return classify(fmt.Errorf("cannot record the chain cuts: %w", err))
	}
	v := uint64(time.Now().UnixNano())
	if s.signable == nil {
		s.signable = map[cutID]bool{}
	}
	for _, c := range cuts {
		// Signable from now: a send that fails after ClickHouse stored
		// the cut leaves it for the next checkpoint.
		s.signable[cutID{c.tenant, int64(c.seq), chain.Hash([]byte(c.prev)).String(), c.before.Unix()}] = true
		if err := b.Append(c.tenant, s.opts.Replica, c.seq, c.prev, time.Unix(c.before.Unix(), 0), v); err != nil {
			b.Abort()
			return fmt.Errorf("cannot record the chain cuts: %w", err)
		}
	}
	if err := b.Send(); err != nil {
		return classify(fmt.Errorf("cannot record the chain cuts: %w", err))
	}
	if s.opts.SigningKey != nil {
		if err := s.checkpoint(ctx, true); err != nil {
			return err
		}
	}
	for _, c := range cuts {
		cond := fmt.Sprintf("tenant = %s AND replica = %s AND seq < %d", quote(c.tenant), quote(s.opts.Replica), c.seq)
		name := s.layout.DB + ".chain"
		if err := s.deleteFrom(ctx, "chain", name, name, cond); err != nil {
			return err
		}
	}
	return nil
}

// chainMigration is the schema migration that adds the chain.
const chainMigration = 4

// adoptEntryRows bounds the rows of one entry adoptHistory makes.
const adoptEntryRows = 100_000

// adoptHistory chains what a store held before migration 0004: per tenant
// and kind, entries of up to adoptEntryRows rows of chain_entry 0, with
// nonce 0, so that verify checks that history from the migration on (not
// before it). Rows a collector of an older release stores after it are
// reported by verify as inserted.
func (s *Store) adoptHistory(ctx context.Context) error {
	if err := s.loadHeads(ctx); err != nil {
		return err
	}
	s.chainMu.Lock()
	defer s.chainMu.Unlock()
	n := 0
	adopt := func(kind, q string, scan func(driver.Rows) (string, sum, int64, error)) error {
		rows := map[string]*entryRows{}
		flush := func(tenant string) error {
			e := rows[tenant]
			if e == nil || len(e.sums) == 0 {
				return nil
			}
			delete(rows, tenant)
			h := s.heads[tenant]
			r := chainRow{Tenant: tenant, Replica: s.opts.Replica, Seq: h.seq + 1, Kind: kind, Prev: h.hash,
				Time: time.Now(), Sums: e.sums, Times: e.times}
			r.Digest = digestOf(r.Sums, r.Times)
			ent := r.entry()
			r.Hash = ent.Hash()
			if err := s.insertRows(ctx, "chain", chainColumns, chainColumnValues([]chainRow{r})); err != nil {
				return err
			}
			s.heads[tenant] = head{seq: r.Seq, hash: r.Hash}
			n += len(r.Sums)
			return nil
		}
		err := each(ctx, s.conn, "read the history to chain", q, func(r driver.Rows) error {
			tenant, sm, t, err := scan(r)
			if err != nil {
				return err
			}
			e := rows[tenant]
			if e == nil {
				e = &entryRows{}
				rows[tenant] = e
			}
			e.sums, e.times = append(e.sums, sm), append(e.times, uint32(t))
			if len(e.sums) >= adoptEntryRows {
				return flush(tenant)
			}
			return nil
		})
		if err != nil {
			return err
		}
		tenants := make([]string, 0, len(rows))
		for t := range rows {
			tenants = append(tenants, t)
		}
		sort.Strings(tenants)
		for _, t := range tenants {
			if err := flush(t); err != nil {
				return err
			}
		}
		return nil
	}
	err := adopt(chain.KindCalls, "SELECT "+callSelect+" FROM "+s.layout.table("calls")+" WHERE chain_entry = 0", func(r driver.Rows) (string, sum, int64, error) {
		c, err := scanCall(r)
		return c.Tenant, callSum(&c), c.Time, err
	})
	if err == nil {
		err = adopt(chain.KindFindings, "SELECT "+findingSelect+" FROM "+s.layout.table("findings")+" WHERE chain_entry = 0", func(r driver.Rows) (string, sum, int64, error) {
			f, err := scanFinding(r)
			return f.Tenant, findingSum(&f), f.Time, err
		})
	}
	if err == nil {
		err = adopt(chain.KindChanges, "SELECT tenant, finding_id, time, time_nanos, state, by, note, chain_entry FROM "+s.layout.table("finding_changes")+" WHERE chain_entry = 0", func(r driver.Rows) (string, sum, int64, error) {
			var c changeRow
			var t time.Time
			err := r.Scan(&c.Tenant, &c.FindingID, &t, &c.TimeNanos, &c.State, &c.By, &c.Note, &c.Chain)
			c.Time = t.Unix()
			return c.Tenant, changeSum(&c), c.Time, err
		})
	}
	if err != nil {
		return fmt.Errorf("cannot chain the history stored before the chain: %w", err)
	}
	if n > 0 {
		s.log.Info("clickhouse: chained the history stored before tamper evidence", "rows", n)
	}
	return nil
}

// insertRows inserts one block of rows into a table of the database,
// within InsertTimeout.
func (s *Store) insertRows(ctx context.Context, table string, names []string, cols []any) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.InsertTimeout)
	defer cancel()
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.layout.DB+"."+table+" ("+strings.Join(names, ", ")+")")
	if err != nil {
		return classify(fmt.Errorf("cannot insert into %s: %w", table, err))
	}
	for i, c := range cols {
		if err := b.Column(i).Append(c); err != nil {
			b.Abort()
			return fmt.Errorf("cannot encode column %s of %s: %w", names[i], table, err)
		}
	}
	if err := b.Send(); err != nil {
		return classify(fmt.Errorf("cannot insert into %s: %w", table, err))
	}
	return nil
}
