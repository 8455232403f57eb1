package sqlite

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/exporter/chain"
)

// vBlock is a record of chain_blocks, with the entry that covers it.
type vBlock struct {
	LogBlock
	entry int64
}

// checkBlocks checks the records of the call logs' blocks (chain_blocks)
// against the blocks entries that cover them, the cuts of the logs the
// chain records, and, with openLogs, every block on disk against its
// record: a block changed (even with a checksum of its own), a segment
// truncated or deleted outside retention, a block no record covers, and a
// cut in the logs' cuts file past the chain's are each a problem naming
// the tenant, the file and the block.
func (v *verifier) checkBlocks() error {
	var tables int
	if err := v.tx.QueryRowContext(v.ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'chain_blocks'`).Scan(&tables); err != nil {
		return err
	}
	recs := map[string][]vBlock{}
	if tables == 0 {
		if v.hasKind(chain.KindBlocks) {
			v.r.Add("*", "chain_blocks", "the table is gone, though the chains hold blocks entries: the records of the call logs' blocks were deleted outside the collector")
		}
	} else {
		rows, err := v.tx.QueryContext(v.ctx, `SELECT tenant, seg, block, calls, first, last, hash, entry FROM chain_blocks ORDER BY tenant, seg, block`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var b vBlock
			var seg int64
			var h []byte
			if err := rows.Scan(&b.Tenant, &seg, &b.Block, &b.Calls, &b.First, &b.Last, &h, &b.entry); err != nil {
				rows.Close()
				return err
			}
			b.Segment = uint64(seg)
			copy(b.SHA256[:], h)
			recs[b.Tenant] = append(recs[b.Tenant], b)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	v.checkBlockRecords(recs)
	cuts := v.logCuts()
	if v.openLogs == nil {
		return nil
	}
	logs, err := v.openLogs()
	if err != nil {
		v.r.Add("*", "the call logs", "cannot be opened to hash their blocks: %v", err)
		return nil
	}
	defer logs.Close()
	if len(recs) == 0 && !v.hasKind(chain.KindBlocks) && len(logs.Tenants()) == 0 {
		return nil // calls kept in SQLite: no log, none chained
	}
	// Retention chains a cut of the logs before it writes the cuts file
	// and removes segments: one that ran between the snapshot and the
	// opening of the logs has its cut committed by now.
	later, err := v.laterLogCuts()
	if err != nil {
		return err
	}
	for tenant, c := range later {
		if old, ok := cuts[tenant]; !ok || c > old {
			cuts[tenant] = c
			v.r.Note("call logs: tenant %q: retention cut its log at %s after the store's snapshot was taken (chained then); the log is checked against that cut",
				tenant, fromNanos(c).UTC().Format(time.RFC3339Nano))
		}
	}
	tenants := logs.Tenants()
	for t := range recs {
		if !slices.Contains(tenants, t) {
			tenants = append(tenants, t)
		}
	}
	slices.Sort(tenants)
	fileCuts := logs.Cuts()
	var hashed, retained, unchained int64
	for _, tenant := range tenants {
		if fc, ok := fileCuts[tenant]; ok && fc > cuts[tenant] {
			chained := "none"
			if c, ok := cuts[tenant]; ok {
				chained = fromNanos(c).UTC().Format(time.RFC3339Nano)
			}
			v.r.Add(tenant, "the call logs' cuts file", "puts the tenant's retention cut at %s, past the last cut the chain records (%s): "+
				"reads leave out calls retention did not delete; edited outside the collector", fromNanos(fc).UTC().Format(time.RFC3339Nano), chained)
		}
		h, r, u, err := v.checkTenantBlocks(logs, tenant, recs[tenant], cuts)
		if err != nil {
			return err
		}
		hashed, retained, unchained = hashed+h, retained+r, unchained+u
	}
	v.r.Note("call logs: %s hashed again and matched the chain (%s)", chain.Count(hashed, "block", "blocks"), chain.Count(v.r.Calls, "call", "calls"))
	if retained > 0 {
		v.r.Note("call logs: %s chained are in segments retention removed (wholly before their tenant's chained cut)", chain.Count(retained, "block", "blocks"))
	}
	if len(cuts) > 0 {
		var removed int
		for k, rs := range v.pruned {
			if e := v.bySeq[k.tenant][k.seq]; e != nil && e.Kind == chain.KindBlocks {
				removed += len(rs)
			}
		}
		v.r.Note("call logs: %s a chained retention cut of its log: the records of blocks in segments retention removed before it go with the segments, "+
			"%s kept as hashes until the chain's cut passes the entries that hold them", chain.Count(len(cuts), "tenant has", "tenants have"),
			chain.Count(removed, "record", "records"))
	}
	if unchained > 0 {
		verb := "are"
		if unchained == 1 {
			verb = "is"
		}
		v.r.Note("call logs: %s on disk after the last one chained %s not chained yet: synced after the store's snapshot, or before a crash (serve's next start chains them)",
			chain.Count(unchained, "block", "blocks"), verb)
	}
	return nil
}

// checkBlockRecords checks each tenant's block records against the blocks
// entries that cover them: count, digest, and that each names one.
func (v *verifier) checkBlockRecords(recs map[string][]vBlock) {
	groups := map[entryKey][]LogBlock{}
	for tenant, bs := range recs {
		for _, b := range bs {
			e := v.bySeq[tenant][b.entry]
			if e == nil || e.Kind != chain.KindBlocks {
				v.r.Add(tenant, fmt.Sprintf("the record of block %d of call log segment %d", b.Block, b.Segment),
					"names chain entry %d, which holds no blocks of its tenant: inserted outside the collector", b.entry)
				continue
			}
			k := entryKey{tenant, b.entry}
			groups[k] = append(groups[k], b.LogBlock)
		}
	}
	for tenant, es := range v.entries {
		for _, e := range es {
			switch e.Kind {
			case chain.KindLogCut:
				if e.Digest != logCutDigest(e.First) || e.First != e.Last {
					v.r.Add(tenant, e.where(), "its digest does not match its cut: the entry was edited")
				}
			case chain.KindBlocks:
				k := entryKey{tenant, e.Seq}
				bs, removed := groups[k], v.pruned[k]
				found := len(bs) + len(removed)
				switch {
				case int64(found) < e.N:
					v.r.Add(tenant, e.where(), "%s recorded, %d found (%d of them removed by retention with their segments): records of blocks deleted",
						chain.Count(e.N, "block", "blocks"), found, len(removed))
				case int64(found) > e.N:
					v.r.Add(tenant, e.where(), "%s recorded, %d found: records of blocks inserted", chain.Count(e.N, "block", "blocks"), found)
				case blocksDigestWith(bs, removed) != e.Digest:
					v.r.Add(tenant, e.where(), "its blocks' records differ from what was chained: a record was edited")
				}
			}
		}
	}
}

// logCuts returns, by tenant, the latest cut of its call log the chain
// records.
func (v *verifier) logCuts() map[string]int64 {
	out := map[string]int64{}
	for tenant, es := range v.entries {
		for _, e := range es {
			if e.Kind == chain.KindLogCut {
				if c, ok := out[tenant]; !ok || e.First > c {
					out[tenant] = e.First
				}
			}
		}
	}
	return out
}

// laterLogCuts returns, by tenant, the latest cut of its call log the
// chain holds now, read in a transaction of its own begun after the logs
// were opened: it sees every cut that could have changed the files. Only
// logcut entries whose digest matches their cut count; the chain
// checked is still the snapshot's.
func (v *verifier) laterLogCuts() (map[string]int64, error) {
	db, err := openReadOnly(v.path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(v.ctx, `SELECT tenant, first, last, digest FROM chain WHERE kind = ?`, chain.KindLogCut)
	if err != nil {
		return nil, fmt.Errorf("cannot read the cuts of the call logs again: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var tenant string
		var first, last int64
		var d []byte
		if err := rows.Scan(&tenant, &first, &last, &d); err != nil {
			return nil, fmt.Errorf("cannot read the cuts of the call logs again: %w", err)
		}
		if want := logCutDigest(first); first != last || !bytes.Equal(d, want[:]) {
			continue
		}
		if c, ok := out[tenant]; !ok || first > c {
			out[tenant] = first
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read the cuts of the call logs again: %w", err)
	}
	return out, nil
}

// checkTenantBlocks compares the blocks of tenant's log on disk with its
// records (in log order). It returns the blocks that matched, those
// retention removed, and those after the last record (not chained yet).
func (v *verifier) checkTenantBlocks(logs BlockLog, tenant string, recs []vBlock, cuts map[string]int64) (hashed, retained, unchained int64, err error) {
	type pos struct {
		seg uint64
		blk int
	}
	segs, err := logs.Segments(tenant)
	if err != nil {
		v.r.Add(tenant, "its call log", "cannot be read: %v", err)
		return 0, 0, 0, nil
	}
	onDisk := map[uint64]bool{}
	disk := map[pos]LogBlock{}
	var order []pos
	for _, seg := range segs {
		// The log opens a live segment whose file is gone as an empty
		// one: the file says whether it is there.
		if _, err := os.Stat(logs.SegmentFile(tenant, seg)); err != nil {
			continue
		}
		onDisk[seg] = true
		n := 0
		err := logs.Blocks(v.ctx, tenant, seg, func(b LogBlock) error {
			disk[pos{b.Segment, b.Block}] = b
			order = append(order, pos{b.Segment, b.Block})
			n++
			return nil
		})
		if err != nil {
			if v.ctx.Err() != nil {
				return 0, 0, 0, v.ctx.Err()
			}
			v.r.Add(tenant, fmt.Sprintf("call log %s block %d", logs.SegmentFile(tenant, seg), n), "cannot be read: %v: the file was truncated or damaged", err)
		}
	}
	// Blocks chained but not on disk, by segment.
	type gone struct {
		blocks []int
		entry  int64
		last   int64
	}
	missing := map[uint64]*gone{}
	var missingSegs []uint64
	recorded := map[pos]bool{}
	var lastRec *vBlock
	cut, hasCut := cuts[tenant]
	// Retention never removes the log's last segment (the live one), and
	// new segments are numbered past those on disk: a segment gone with
	// none on disk numbered past it is not retention's (review52).
	var top uint64
	for seg := range onDisk {
		top = max(top, seg)
	}
	for i := range recs {
		b := &recs[i]
		p := pos{b.Segment, b.Block}
		recorded[p] = true
		lastRec = b
		d, ok := disk[p]
		if ok {
			if d.SHA256 != b.SHA256 || d.Calls != b.Calls || d.First != b.First || d.Last != b.Last {
				v.r.Add(tenant, fmt.Sprintf("call log %s block %d", logs.SegmentFile(tenant, b.Segment), b.Block),
					"its bytes differ from what chain entry %d recorded (SHA-256 %x, now %x): the block was changed on disk", b.entry, b.SHA256[:6], d.SHA256[:6])
				continue
			}
			hashed++
			v.r.Calls += int64(b.Calls)
			continue
		}
		if !onDisk[b.Segment] && hasCut && b.Last < cut && b.Segment < top {
			retained++
			continue
		}
		g := missing[b.Segment]
		if g == nil {
			g = &gone{entry: b.entry}
			missing[b.Segment] = g
			missingSegs = append(missingSegs, b.Segment)
		}
		g.blocks = append(g.blocks, b.Block)
		g.last = max(g.last, b.Last)
	}
	for _, seg := range missingSegs {
		g := missing[seg]
		file := logs.SegmentFile(tenant, seg)
		blocks := spanList(g.blocks)
		if !onDisk[seg] {
			why := "the chain records no retention cut of the tenant's log"
			if hasCut {
				why = fmt.Sprintf("they hold calls up to %s, not before the tenant's chained retention cut %s",
					fromNanos(g.last).UTC().Format(time.RFC3339Nano), fromNanos(cut).UTC().Format(time.RFC3339Nano))
			}
			v.r.Add(tenant, "call log "+file, "the segment file is gone with %s chained from entry %d on (%s): deleted outside retention", blocks, g.entry, why)
			continue
		}
		verb := "are"
		if len(g.blocks) == 1 {
			verb = "is"
		}
		v.r.Add(tenant, fmt.Sprintf("call log %s %s", file, blocks), "chained from entry %d on, %s gone from the file: the segment was truncated or its blocks removed", g.entry, verb)
	}
	for _, p := range order {
		if recorded[p] {
			continue
		}
		if lastRec == nil || (&LogBlock{Segment: p.seg, Block: p.blk}).after(lastRec.Segment, lastRec.Block) {
			unchained++
			continue
		}
		v.r.Add(tenant, fmt.Sprintf("call log %s block %d", logs.SegmentFile(tenant, p.seg), p.blk),
			"is in no chain entry of its tenant, though later blocks are: inserted outside the collector, or its record deleted")
	}
	return hashed, retained, unchained, nil
}

// spanList names blocks: "block 3", "blocks 3 to 9", or a list.
func spanList(bs []int) string {
	if len(bs) == 1 {
		return fmt.Sprintf("block %d", bs[0])
	}
	if bs[len(bs)-1]-bs[0] == len(bs)-1 {
		return fmt.Sprintf("blocks %d to %d", bs[0], bs[len(bs)-1])
	}
	var b strings.Builder
	for i, n := range bs {
		if i == 8 {
			fmt.Fprintf(&b, " and %d more", len(bs)-8)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, n)
	}
	return "blocks " + b.String()
}

// blocksDigestWith is blocksDigest of the records bs and of the blocks
// retention removed whose hashes chain_pruned keeps (removed, by row key).
// A row that names no block makes the digest differ.
func blocksDigestWith(bs []LogBlock, removed map[string]chain.Hash) chain.Hash {
	if len(removed) == 0 {
		return blocksDigest(bs)
	}
	type pos struct {
		seg uint64
		blk int
		h   chain.Hash
	}
	all := make([]pos, 0, len(bs)+len(removed))
	for i := range bs {
		all = append(all, pos{bs[i].Segment, bs[i].Block, blockHash(&bs[i])})
	}
	for k, h := range removed {
		seg, blk, ok := parseBlockRow([]byte(k))
		if !ok {
			return chain.Hash{}
		}
		all = append(all, pos{seg, blk, h})
	}
	slices.SortFunc(all, func(a, b pos) int { return cmp.Or(cmp.Compare(a.seg, b.seg), cmp.Compare(a.blk, b.blk)) })
	hs := make([]chain.Hash, len(all))
	for i := range all {
		hs[i] = all[i].h
	}
	return chain.Digest(hs)
}
