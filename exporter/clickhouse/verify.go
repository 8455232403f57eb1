package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/mcpaudit/mcpaudit/exporter/chain"
)

// Verify checks the ClickHouse store in database at dsn against its
// tamper-evidence chains and, with keys, their signed checkpoints (each
// must verify with one of keys: the collector's successive signing keys'
// public keys). It only
// reads: collectors may keep writing (entries made meanwhile can show as
// rows without their entry yet; run it again). Every edit, deletion and
// insertion of stored calls, findings and finding state changes is reported
// with its tenant, chain entry and row id. An error means the check could
// not run.
func Verify(ctx context.Context, dsn, database string, keys chain.Keys) (*chain.Report, error) {
	if !identifier.MatchString(database) {
		return nil, fmt.Errorf("cannot verify: database must be a plain identifier, not %q", database)
	}
	conn, err := verifyConn(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = "+quote(database)+" AND name = 'chain'").Scan(&n); err != nil {
		return nil, fmt.Errorf("cannot verify: %w", err)
	}
	if n == 0 {
		return nil, fmt.Errorf("cannot verify database %s: it has no chain table (no mcpaudit store, or one older than tamper evidence: start serve on it once to migrate it)", database)
	}
	v := &chVerifier{ctx: ctx, conn: conn, db: database, r: &chain.Report{}}
	if err := v.run(keys); err != nil {
		return nil, fmt.Errorf("cannot verify database %s: %w", database, err)
	}
	return v.r, nil
}

// verifyConn connects for Verify, with the settings an old server needs.
func verifyConn(ctx context.Context, dsn string) (driver.Conn, error) {
	opts, err := ch.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("invalid clickhouse dsn: %w", err)
	}
	conn, err := openConn(ctx, opts)
	if err != nil {
		return nil, err
	}
	sv, err := conn.ServerVersion()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("cannot read the clickhouse server version: %w", err)
	}
	if capabilitiesOf(version{sv.Version.Major, sv.Version.Minor, sv.Version.Patch}).LowCardinalityExperimental {
		conn.Close()
		opts.Settings = ch.Settings{"allow_experimental_low_cardinality_type": 1}
		return openConn(ctx, opts)
	}
	return conn, nil
}

// vEntry is a stored chain entry as verify sees it.
type vEntry struct {
	chainRow
	hash    chain.Hash // as stored
	index   map[sum][]int
	matched []bool
	strays  []stray // rows tagged with it that it did not chain
	skip    bool    // before its chain's cut: retention is removing it
}

// stray is a stored row whose contents its entry did not chain.
type stray struct {
	what string
	time int64
}

func (e *vEntry) where() string {
	rep := ""
	if e.Replica != "" {
		rep = fmt.Sprintf(" of replica %q", e.Replica)
	}
	return fmt.Sprintf("chain entry %d%s (%s, %s, committed %s)", e.Seq, rep, e.Kind, chain.Count(len(e.Sums), "row", "rows"), e.Time.UTC().Format(time.RFC3339Nano))
}

type chainKey struct{ tenant, replica string }

type kindKey struct{ kind, tenant string }

type tagKey struct {
	kind, tenant string
	nonce        uint64
}

type sumKey struct {
	kind, tenant string
	sum          sum
}

type chVerifier struct {
	ctx  context.Context
	conn driver.Conn
	db   string
	r    *chain.Report

	chains   map[chainKey][]*vEntry
	cuts     map[chainKey]chain.Cut
	tags     map[tagKey][]*vEntry // several for nonce 0: the history adopted at migration
	recorded map[sumKey]bool      // the rows some entry chained
	found    map[sumKey]bool      // the rows stored
	copies   int64                // rows of interrupted inserts, equal to a chained row
	orphans  map[kindKey][]string

	// cps the stored checkpoints, and signedCuts the cuts each replica's
	// checkpoints signed (with a public key only).
	cps        []vCheckpoint
	signedCuts map[chainKey][]chain.Cut
}

// vCheckpoint is a stored checkpoint with its body, opened with the
// public key (ok false: its signature does not verify, or it was signed
// for another replica).
type vCheckpoint struct {
	replica string
	c       chain.Checkpoint
	body    chain.Body
	ok      bool
	// key is the key that verified it; err why none did (ok false).
	key *chain.PublicKey
	err error
}

func (v *chVerifier) run(keys chain.Keys) error {
	if err := v.loadChains(); err != nil {
		return err
	}
	if err := v.loadCheckpoints(keys); err != nil {
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
	v.checkMissing()
	v.reportOrphans()
	if v.copies == 1 {
		v.r.Note("1 stored row is a copy of a chained row left by an insert a crash or an outage interrupted (the same contents, chained again by the retry)")
	} else if v.copies > 1 {
		v.r.Note("%d stored rows are copies of chained rows left by inserts a crash or an outage interrupted (the same contents, chained again by the retry)", v.copies)
	}
	return v.checkCheckpoints(keys)
}

func (v *chVerifier) loadChains() error {
	v.chains, v.tags = map[chainKey][]*vEntry{}, map[tagKey][]*vEntry{}
	v.recorded, v.found, v.orphans = map[sumKey]bool{}, map[sumKey]bool{}, map[kindKey][]string{}
	cuts, err := readCuts(v.ctx, v.conn, v.db, "")
	if err != nil {
		return err
	}
	v.cuts = map[chainKey]chain.Cut{}
	for _, c := range cuts {
		v.cuts[chainKey{c.Tenant, c.Replica}] = c
	}
	q := "SELECT " + strings.Join(chainColumns, ", ") + " FROM " + v.db + ".chain FINAL ORDER BY tenant, replica, seq"
	return each(v.ctx, v.conn, "read the chains", q, func(rows driver.Rows) error {
		e := &vEntry{}
		var n uint64
		var digest, prev, hash string
		var t time.Time
		var ns uint32
		var sums []string
		if err := rows.Scan(&e.Tenant, &e.Replica, &e.Seq, &e.Kind, &e.Nonce, &n, &digest, &prev, &hash,
			&t, &ns, &sums, &e.Times); err != nil {
			return err
		}
		copy(e.Digest[:], digest)
		copy(e.Prev[:], prev)
		copy(e.hash[:], hash)
		e.Time = time.Unix(t.Unix(), int64(ns))
		e.Sums = make([]sum, len(sums))
		for i := range sums {
			copy(e.Sums[i][:], sums[i])
		}
		v.r.Entries++
		k := chainKey{e.Tenant, e.Replica}
		if c, ok := v.cuts[k]; ok && int64(e.Seq) < c.Seq {
			e.skip = true // retention removes it
			// Retention cuts before the first entry that is no cut entry
			// and holds a row not older than its cutoff: an entry before
			// the cut holding one was not cut by retention (review
			// rev19c's D4, as far as the entries left show it).
			if e.Kind != chain.KindCut {
				for _, t := range e.Times {
					if int64(t) >= c.Before.Unix() {
						v.r.Add(e.Tenant, e.where(), "it is before the cut before entry %d, but holds a row of time %s, not older than the cut's retention cutoff %s: retention did not cut it, so the cut is not retention's",
							c.Seq, time.Unix(int64(t), 0).UTC().Format(time.RFC3339), c.Before.UTC().Format(time.RFC3339))
						break
					}
				}
			}
			return nil
		}
		if uint64(len(e.Sums)) != n || len(e.Times) != len(e.Sums) {
			v.r.Add(e.Tenant, e.where(), "the entry itself was edited: it lists %s and %s for %s", chain.Count(len(e.Sums), "hash", "hashes"),
				chain.Count(len(e.Times), "time", "times"), chain.Count(n, "row", "rows"))
			m := min(len(e.Sums), len(e.Times))
			e.Sums, e.Times = e.Sums[:m], e.Times[:m]
		}
		e.index, e.matched = make(map[sum][]int, len(e.Sums)), make([]bool, len(e.Sums))
		for i, s := range e.Sums {
			e.index[s] = append(e.index[s], i)
			v.recorded[sumKey{e.Kind, e.Tenant, s}] = true
		}
		v.chains[k] = append(v.chains[k], e)
		tk := tagKey{e.Kind, e.Tenant, e.Nonce}
		v.tags[tk] = append(v.tags[tk], e)
		return nil
	})
}

// checkLinks checks each chain: consecutive seqs from its start (1 or its
// cut), each entry's hash over its fields, each prev naming the entry
// before, and each digest over the rows it lists.
func (v *chVerifier) checkLinks() {
	tenants := map[string]bool{}
	for k, es := range v.chains {
		tenants[k.tenant] = true
		var want uint64 = 1
		var prev chain.Hash
		if c, ok := v.cuts[k]; ok {
			want = uint64(c.Seq)
			prev, _ = chain.ParseHash(c.Prev)
		}
		for _, e := range es {
			if e.Seq != want {
				v.r.Add(k.tenant, e.where(), "%s", chain.MissingEntries(int64(want), int64(e.Seq-1)))
			} else if e.Prev != prev {
				v.r.Add(k.tenant, e.where(), "its previous hash does not name entry %d: the chain was rewritten or reordered here", e.Seq-1)
			}
			// A cut entry's digest names its cut (chain.CutDigest), matched
			// by cutEntry; it lists no rows.
			if ent := e.entry(); ent.Hash() != e.hash {
				v.r.Add(k.tenant, e.where(), "the entry itself was edited: its hash does not match its fields")
			} else if e.Kind == chain.KindCut && len(e.Sums) > 0 {
				v.r.Add(k.tenant, e.where(), "the entry itself was edited: a cut entry lists no rows")
			} else if e.Kind != chain.KindCut && digestOf(e.Sums, e.Times) != e.Digest {
				v.r.Add(k.tenant, e.where(), "the entry itself was edited: its list of rows does not match its digest")
			}
			want, prev = e.Seq+1, e.hash
		}
	}
	v.r.Tenants = int64(len(tenants))
}

// cutBefore returns the latest retention cutoff of tenant over every
// replica's chain: a stored row older whose entry is gone went with
// retention (its entry first, the row next).
func (v *chVerifier) cutBefore(tenant string) time.Time {
	var out time.Time
	for k, c := range v.cuts {
		if k.tenant == tenant && c.Before.After(out) {
			out = c.Before
		}
	}
	return out
}

// signed reports whether a checkpoint of chain k's replica signed cut.
func (v *chVerifier) signed(k chainKey, cut chain.Cut) bool {
	for _, s := range v.signedCuts[k] {
		if s.Seq == cut.Seq && s.Prev == cut.Prev && s.Before.Equal(cut.Before) {
			return true
		}
	}
	return false
}

// row checks one stored row against the entry its tag names.
func (v *chVerifier) row(kind, tenant, id string, s sum, t int64, tag uint64) {
	sk := sumKey{kind, tenant, s}
	v.found[sk] = true
	what := fmt.Sprintf("%s %s (time %s)", singular(kind), id, time.Unix(t, 0).UTC().Format(time.RFC3339))
	if es := v.tags[tagKey{kind, tenant, tag}]; len(es) > 0 {
		for _, e := range es {
			for _, i := range e.index[s] {
				if !e.matched[i] {
					e.matched[i] = true
					return
				}
			}
		}
		for _, e := range es {
			if len(e.index[s]) > 0 {
				return // a copy of a row it chained (stored twice, not yet collapsed)
			}
		}
		es[0].strays = append(es[0].strays, stray{what, t})
		return
	}
	switch {
	case v.recorded[sk]:
		v.copies++
	case t < v.cutBefore(tenant).Unix():
		// Its entry went with retention; the row goes next.
	default:
		k := kindKey{kind, tenant}
		v.orphans[k] = append(v.orphans[k], what)
	}
}

// reportOrphans reports the rows in no chain entry, one line per tenant
// and kind.
func (v *chVerifier) reportOrphans() {
	keys := make([]kindKey, 0, len(v.orphans))
	for k := range v.orphans {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].tenant+keys[i].kind < keys[j].tenant+keys[j].kind })
	for _, k := range keys {
		rows := v.orphans[k]
		more := ""
		if len(rows) > 20 {
			more, rows = fmt.Sprintf(" and %d more", len(rows)-20), rows[:20]
		}
		v.r.Add(k.tenant, fmt.Sprintf("%d %s", len(v.orphans[k]), k.kind), "in no chain entry of their tenant: inserted outside the collector, moved from another tenant, or their entry deleted: %s%s",
			strings.Join(rows, ", "), more)
	}
}

func singular(kind string) string {
	switch kind {
	case chain.KindCalls:
		return "call"
	case chain.KindFindings:
		return "finding"
	}
	return "finding change"
}

func (v *chVerifier) checkCalls() error {
	q := "SELECT " + callSelect + " FROM " + v.db + ".calls"
	return each(v.ctx, v.conn, "read the calls", q, func(rows driver.Rows) error {
		r, err := scanCall(rows)
		if err != nil {
			return err
		}
		v.r.Calls++
		v.row(chain.KindCalls, r.Tenant, r.ID, callSum(&r), r.Time, r.Chain)
		return nil
	})
}

func (v *chVerifier) checkFindings() error {
	q := "SELECT " + findingSelect + " FROM " + v.db + ".findings"
	return each(v.ctx, v.conn, "read the findings", q, func(rows driver.Rows) error {
		r, err := scanFinding(rows)
		if err != nil {
			return err
		}
		v.r.Findings++
		v.row(chain.KindFindings, r.Tenant, r.ID, findingSum(&r), r.Time, r.Chain)
		return nil
	})
}

func (v *chVerifier) checkChanges() error {
	q := "SELECT tenant, finding_id, time, time_nanos, state, by, note, chain_entry FROM " + v.db + ".finding_changes"
	return each(v.ctx, v.conn, "read the finding changes", q, func(rows driver.Rows) error {
		var c changeRow
		var t time.Time
		if err := rows.Scan(&c.Tenant, &c.FindingID, &t, &c.TimeNanos, &c.State, &c.By, &c.Note, &c.Chain); err != nil {
			return err
		}
		c.Time = t.Unix()
		v.r.Changes++
		v.row(chain.KindChanges, c.Tenant, c.id(), changeSum(&c), c.Time, c.Chain)
		return nil
	})
}

// checkMissing reports, for each entry, the rows it chained that no table
// holds (but for those stored twice and collapsed, and those retention
// removed) and the rows tagged with it that it did not chain: a row of each
// at the same time is one row edited.
func (v *chVerifier) checkMissing() {
	for k, es := range v.chains {
		// Every replica's cut of the tenant excuses the chain's missing
		// rows, signed or not: retention deletes every replica's rows of a
		// tenant (the fallback's deletes and TTL go by tenant). cut21 held
		// an unsigned cut to its own chain (review rev20c's D2); review
		// rev21c found that made an honest keyless replica's retention
		// report the other chains TAMPERED between passes
		// (TestRev21c_ReplicasCutApart), while a forger gets D2 from a cut
		// of each chain at its own start anyway
		// (TestRev21c_ForgedCutOfTheOwnChain); verify --key-always reports
		// both.
		before := v.cutBefore(k.tenant).Unix()
		for _, e := range es {
			var gone []int64
			for i, s := range e.Sums {
				if e.matched[i] || v.found[sumKey{e.Kind, k.tenant, s}] || int64(e.Times[i]) < before {
					continue
				}
				gone = append(gone, int64(e.Times[i]))
			}
			for _, st := range e.strays {
				if j := slices.Index(gone, st.time); j >= 0 {
					gone = slices.Delete(gone, j, j+1)
					v.r.Add(k.tenant, st.what, "its contents differ from what %s chained: edited", e.where())
					continue
				}
				v.r.Add(k.tenant, st.what, "carries the tag of %s, which did not chain it: inserted outside the collector", e.where())
			}
			if len(gone) > 0 {
				times := make([]string, 0, min(len(gone), 20))
				for _, t := range gone[:min(len(gone), 20)] {
					times = append(times, time.Unix(t, 0).UTC().Format(time.RFC3339))
				}
				more := ""
				if len(gone) > 20 {
					more = fmt.Sprintf(" and %d more", len(gone)-20)
				}
				v.r.Add(k.tenant, e.where(), "%s gone: deleted: %s of time %s%s", goneOf(len(gone), len(e.Sums)), e.Kind, strings.Join(times, ", "), more)
			}
		}
	}
}

// loadCheckpoints reads the checkpoints and, with keys, opens them and
// collects the cuts each replica's checkpoints signed.
func (v *chVerifier) loadCheckpoints(keys chain.Keys) error {
	v.signedCuts = map[chainKey][]chain.Cut{}
	q := "SELECT replica, seq, body, sig FROM " + v.db + ".checkpoints FINAL ORDER BY replica, seq"
	err := each(v.ctx, v.conn, "read the checkpoints", q, func(rows driver.Rows) error {
		var c vCheckpoint
		var seq uint64
		var body, sig string
		if err := rows.Scan(&c.replica, &seq, &body, &sig); err != nil {
			return err
		}
		c.c = chain.Checkpoint{Seq: int64(seq), Body: []byte(body), Sig: []byte(sig)}
		v.cps = append(v.cps, c)
		return nil
	})
	if err != nil || len(keys) == 0 {
		return err
	}
	for i := range v.cps {
		c := &v.cps[i]
		body, key, err := keys.Open(&c.c)
		if err != nil {
			c.err = err
			continue
		}
		c.body = body
		if body.Replica != c.replica {
			continue
		}
		c.ok, c.key = true, key
		for _, cut := range body.Cuts {
			k := chainKey{cut.Tenant, body.Replica}
			v.signedCuts[k] = append(v.signedCuts[k], cut)
		}
	}
	return nil
}

// checkCheckpoints checks each checkpoint's signature, that the chains
// still pass through every signed head, and that every cut was signed.
func (v *chVerifier) checkCheckpoints(pubs chain.Keys) error {
	cps := v.cps
	v.r.Checkpoints = int64(len(cps))
	if len(pubs) == 0 {
		v.r.Note("no public key given: the chains were checked against themselves, not against signed checkpoints; anyone who can write the tables can rewrite a chain whole")
		return nil
	}
	if len(cps) == 0 {
		if v.r.Entries > 0 {
			v.r.Add("*", "checkpoints", "none is stored, though the chains hold %s: the store was written without a signing key, or its checkpoints were deleted", chain.Count(v.r.Entries, "entry", "entries"))
		}
		return nil
	}
	signed := map[chainKey]uint64{}
	signers := chain.NewSigners(pubs)
	defer signers.Note(v.r)
	unverified := map[string]int{} // replica → its checkpoints no given key verified
	for _, c := range cps {
		where := fmt.Sprintf("checkpoint %d of replica %q", c.c.Seq, c.replica)
		if c.err != nil {
			v.r.Add("*", where, "%s", chain.BadSignature(pubs, c.err))
			unverified[c.replica]++
			continue
		}
		if !c.ok {
			v.r.Add("*", where, "it was signed for another replica (%q): moved from another replica's checkpoints", c.body.Replica)
			continue
		}
		if p := signers.Add(c.key, fmt.Sprintf(" of replica %q", c.replica), c.c.Seq); p != "" {
			v.r.Add("*", where, "%s", p)
		}
		body := c.body
		for _, h := range body.Heads {
			k := chainKey{h.Tenant, body.Replica}
			signed[k] = max(signed[k], uint64(h.Seq))
			var e *vEntry
			for _, x := range v.chains[k] {
				if int64(x.Seq) == h.Seq {
					e = x
				}
			}
			if e == nil {
				if cut, ok := v.cuts[k]; ok && cut.Seq > h.Seq {
					continue // cut by retention since
				}
				v.r.Add(h.Tenant, where, "signed chain entry %d, which is gone", h.Seq)
				continue
			}
			if e.hash.String() != h.Hash {
				v.r.Add(h.Tenant, where+" at "+body.Time.UTC().Format(time.RFC3339), "signed entry %d with another hash: the history up to it was rewritten", h.Seq)
			}
		}
	}
	cutKeys := make([]chainKey, 0, len(v.cuts))
	for k := range v.cuts {
		cutKeys = append(cutKeys, k)
	}
	sortKeys(cutKeys)
	for _, k := range cutKeys {
		cut := v.cuts[k]
		if v.signed(k, cut) {
			continue
		}
		where := fmt.Sprintf("the cut before entry %d of replica %q", cut.Seq, k.replica)
		// A cut no checkpoint signed: retention's while serve ran without
		// its signing key (review rev19c's D1), or a removal. Retention
		// appends a cut entry before it stores the cut, and a keyed serve
		// signs every cut at once: a cut whose entry a checkpoint signed
		// past was left out by it, a removal; one without its entry was not
		// made by retention; one made after the last checkpoint cannot be
		// told from a removal by someone who can write the tables, and is
		// said so (as in the embedded store).
		e := v.cutEntry(k, cut)
		switch {
		case e == nil:
			v.r.Add(k.tenant, where, "no checkpoint signed it, and no cut entry of the chain records it: history was removed outside retention")
		case e.Seq <= 1:
			// Retention appends a cut entry after the entries it cuts, so
			// a chain never begins with one: this chain held nothing to cut
			// (a replica that never ran, review rev20c's D2).
			v.r.Add(k.tenant, where, "no checkpoint signed it, and its cut entry is the first entry of its chain: a cut of a chain that held nothing, not retention's")
		case signed[k] >= e.Seq:
			v.r.Add(k.tenant, where, "no checkpoint signed it, though a checkpoint signed entry %d, after its cut entry %d: history was removed outside retention", signed[k], e.Seq)
		default:
			v.r.UnsignedCut(k.tenant, where, "(retention cutoff %s, recorded by chain entry %d) was made after the last checkpoint and no checkpoint signed it: "+
				"serve cuts so while it runs without its signing key, and someone who can write the tables can too, so it cannot be told from a removal; "+
				"it excuses missing rows of its own replica's chain only; "+
				"serve's next start with its key signs it (verify --key-always, when serve always had its key, reports it as a removal)", cut.Before.UTC().Format(time.RFC3339), e.Seq)
		}
	}
	keys := make([]chainKey, 0, len(v.chains))
	for k := range v.chains {
		keys = append(keys, k)
	}
	sortKeys(keys)
	for _, k := range keys {
		es := v.chains[k]
		if last := es[len(es)-1].Seq; last > signed[k] {
			v.r.Note("tenant %q, replica %q: %s", k.tenant, k.replica, chain.UnsignedEntries(int64(signed[k]+1), int64(last), unverified[k.replica]))
		}
	}
	return nil
}

// sortKeys orders chain keys by tenant, then replica.
func sortKeys(keys []chainKey) {
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].tenant+"\x00"+keys[i].replica < keys[j].tenant+"\x00"+keys[j].replica
	})
}

// cutEntry returns the last cut entry of chain k that records cut (its
// start, that start's prev and the cutoff), or nil.
func (v *chVerifier) cutEntry(k chainKey, cut chain.Cut) *vEntry {
	prev, err := chain.ParseHash(cut.Prev)
	if err != nil {
		return nil
	}
	digest := chain.CutDigest(cut.Seq, prev[:], cut.Before.Unix())
	es := v.chains[k]
	for i := len(es) - 1; i >= 0; i-- {
		if e := es[i]; e.Kind == chain.KindCut && int64(e.Nonce) == cut.Seq && e.Digest == digest {
			return e
		}
	}
	return nil
}

// goneOf says how many of an entry's total rows are gone.
func goneOf(gone, total int) string {
	switch {
	case gone == 1 && total == 1:
		return "its 1 row is"
	case gone == 1:
		return fmt.Sprintf("1 of its %d rows is", total)
	case gone == total:
		return fmt.Sprintf("all %d of its rows are", total)
	}
	return fmt.Sprintf("%d of its %d rows are", gone, total)
}
