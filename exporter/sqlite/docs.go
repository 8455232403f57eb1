package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"math"
	"slices"
)

// The calls on a document: the timeline and the investigation page's
// calls by document read them in (time, rid) order, a batch at a time,
// from the document entries of the index (ids.go), checked against their
// rows, and from the rows past its mark. Until schema 5 they came from the
// SQLite table call_documents, whose key (a 32-bit hash first) made every
// commit write a random page of it.

// docBatchSize is how many entries a read of a document's calls takes from
// the index at a time (a variable for tests).
var docBatchSize = 500

// storedCall is a calls row as read: rid, packed id, time and record blob.
type storedCall struct {
	rid, time int64
	id        any
	blob      []byte
}

// docSpan is where a read of a document's calls stands: after the call
// (time, rid) (rid -1: before every call at time), and before until
// unless unbounded.
type docSpan struct {
	// name is the document (or session) itself, which the call log
	// looks up (Calls "log").
	name      string
	dh        int32
	time, rid int64
	until     int64
	unbounded bool
}

// holds reports whether (t, rid) is past where the span stands and inside
// its end.
func (sp *docSpan) holds(t, rid int64) bool {
	if t < sp.time || t == sp.time && rid <= sp.rid {
		return false
	}
	return sp.unbounded || t < sp.until
}

// ctxQuerier is a connection pool or a read transaction.
type ctxQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// docBatch reads the next calls of the span through q, in (time, rid)
// order, about batch of them (calls on another document of the same hash
// included: the caller checks the record), and moves the span past them.
// It returns done when no call is left.
func (s *Store) docBatch(ctx context.Context, q ctxQuerier, sp *docSpan, batch int) (rows []storedCall, done bool, err error) {
	if s.opts.Calls == CallsLog {
		return s.logBatch(ctx, CallScan{Document: sp.name}, sp, batch)
	}
	var ents []docEntry
	var mark int64
	indexed := s.ids != nil
	if indexed {
		if ents, mark, err = s.ids.docs(sp.dh, sp.time, sp.rid, sp.until, sp.unbounded, batch); err != nil {
			// A damaged index: scan the calls by time instead.
			s.ids.log.Warn("cannot read the document index; scanning the calls", "err", firstLine(err))
			indexed = false
		}
	}
	if !indexed {
		return s.docScan(ctx, q, sp, batch)
	}
	var buf []byte
	var docs []int32
	return s.entryBatch(ctx, q, sp, ents, mark, batch, func(blob []byte) bool {
		docs, buf = recordDocs(buf, blob)
		return slices.Contains(docs, sp.dh)
	})
}

// entryBatch reads the rows of the entries an index read gave (up to batch
// of them, through mark) and the rows past mark that sp holds and match
// accepts (the index's entries stand for their rows; the rows past the
// mark are the last commit's, not yet in it), in (time, rid) order, and
// moves sp past the last entry. It returns done when the entries ran out.
func (s *Store) entryBatch(ctx context.Context, q ctxQuerier, sp *docSpan, ents []docEntry, mark int64, batch int, match func(blob []byte) bool) (rows []storedCall, done bool, err error) {
	if len(ents) > 0 {
		args := make([]any, len(ents))
		for i, e := range ents {
			args[i] = e.rid
		}
		// A rid whose row is gone (a stale entry) reads nothing.
		if rows, err = readCalls(ctx, q, rows, `SELECT rid, id, time, rec FROM calls WHERE rid IN (`+marks(len(args))+`)`, args...); err != nil {
			return nil, false, err
		}
		// A row of another time than its entry's is another call under a
		// stale entry's rid: taken, it would sort at its own time, and a
		// page's cursor after it would skip the calls between the two.
		named := make(map[docEntry]bool, len(ents))
		for _, e := range ents {
			named[e] = true
		}
		rows = slices.DeleteFunc(rows, func(c storedCall) bool { return !named[docEntry{c.time, c.rid}] })
	}
	full := len(ents) == batch
	// The calls past the mark (normally none, or the last commit's): rid
	// is the table's key.
	past, err := readCalls(ctx, q, nil, `SELECT rid, id, time, rec FROM calls WHERE rid > ?`, mark)
	if err != nil {
		return nil, false, err
	}
	for _, c := range past {
		if !sp.holds(c.time, c.rid) {
			continue
		}
		if full {
			// Entries beyond the last one read may come before it.
			last := ents[len(ents)-1]
			if c.time > last.time || c.time == last.time && c.rid > last.rid {
				continue
			}
		}
		if match(c.blob) {
			rows = append(rows, c)
		}
	}
	slices.SortFunc(rows, func(a, b storedCall) int { return cmp.Or(cmp.Compare(a.time, b.time), cmp.Compare(a.rid, b.rid)) })
	if !full {
		return rows, true, nil
	}
	last := ents[len(ents)-1]
	sp.time, sp.rid = last.time, last.rid
	return rows, false, nil
}

// docScan is docBatch without the index (another store holds it, or it is
// damaged): it reads the calls of the span by time, batch at a time, and
// keeps those with a document of the hash.
func (s *Store) docScan(ctx context.Context, q ctxQuerier, sp *docSpan, batch int) ([]storedCall, bool, error) {
	end := `time < ?`
	until := sp.until
	if sp.unbounded {
		end, until = `time <= ?`, math.MaxInt64
	}
	all, err := readCalls(ctx, q, nil, `SELECT rid, id, time, rec FROM calls WHERE (time, rid) > (?, ?) AND `+end+`
		ORDER BY time, rid LIMIT ?`, sp.time, sp.rid, until, batch)
	if err != nil {
		return nil, false, err
	}
	var rows []storedCall
	var buf []byte
	var docs []int32
	for _, c := range all {
		if docs, buf = recordDocs(buf, c.blob); slices.Contains(docs, sp.dh) {
			rows = append(rows, c)
		}
	}
	if len(all) < batch {
		return rows, true, nil
	}
	last := all[len(all)-1]
	sp.time, sp.rid = last.time, last.rid
	return rows, false, nil
}

// readCalls appends to dst the rows (rid, id, time, rec) that query
// selects.
func readCalls(ctx context.Context, q ctxQuerier, dst []storedCall, query string, args ...any) ([]storedCall, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return dst, err
	}
	defer rows.Close()
	for rows.Next() {
		var c storedCall
		if err := rows.Scan(&c.rid, &c.id, &c.time, &c.blob); err != nil {
			return dst, err
		}
		dst = append(dst, c)
	}
	return dst, rows.Err()
}
