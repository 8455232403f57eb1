package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/mcpaudit/mcpaudit/audit"
)

// The calls of a session: the session page reads them in (time, rid)
// order, a batch at a time, from the session entries of the index (ids.go,
// format 2), checked against their rows, and from the rows past its mark,
// as a document's calls are read (docs.go). Without the index (another
// store holds it, or it is damaged) they are read through session_minutes:
// every call of the minutes the session made calls in (scanSession).

// sessSpan is where a read of a session's calls stands: docSpan's place
// and end, the session's hash and name, and its tenant's strs id (-1: every
// tenant).
type sessSpan struct {
	docSpan
	name   string
	tenant int64
}

// errNoSessionIndex is returned by sessBatch when the store has no usable
// index: the caller reads the session through session_minutes.
var errNoSessionIndex = errors.New("no session index")

// sessBatch reads the next calls of the span through q, in (time, rid)
// order, about batch of them (calls of another session of the same hash
// are left out by their record's head), and moves the span past them. It
// returns done when no call is left.
func (s *Store) sessBatch(ctx context.Context, q ctxQuerier, sp *sessSpan, batch int) (rows []storedCall, done bool, err error) {
	if s.ids == nil {
		return nil, false, errNoSessionIndex
	}
	ents, mark, err := s.ids.sessions(sp.dh, sp.tenant, sp.time, sp.rid, sp.until, sp.unbounded, batch)
	if err != nil {
		s.ids.log.Warn("cannot read the session index; reading the session's minutes", "err", firstLine(err))
		return nil, false, errNoSessionIndex
	}
	var buf []byte
	return s.entryBatch(ctx, q, &sp.docSpan, ents, mark, batch, func(blob []byte) bool {
		raw, err := decompress(buf, blob)
		if err != nil {
			return false // undecodable: no page can show it
		}
		if blob[0] != codecRaw {
			buf = raw[:0]
		}
		_, session, _, ok := recordHead(raw)
		return ok && string(session) == sp.name // the tenant is checked with the record
	})
}

// tenantStr returns the strs id of a tenant, and false when no string of
// that name is stored (no call of that tenant is stored either).
func (s *Store) tenantStr(ctx context.Context, tenant string) (int64, bool, error) {
	var id int64
	err := s.r.QueryRowContext(ctx, `SELECT id FROM strs WHERE s = ?`, tenant).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return id, err == nil, err
}

// sessionCalls fills page with the calls of the span that keep accepts, up
// to limit, and sets its cursor when more may follow; *lastTime and
// *lastRID follow the last call read. It returns errNoSessionIndex, before
// or between batches, when the index cannot serve the read: the caller
// goes on through session_minutes from where it stopped.
func (s *Store) sessionCalls(ctx context.Context, sp *sessSpan, keep func(*audit.Record) bool, limit int, page *audit.CallPage, lastTime, lastRID *int64) error {
	if s.opts.Calls == CallsLog {
		return pageCalls(&sp.docSpan, func() ([]storedCall, bool, error) {
			return s.logBatch(ctx, CallScan{Session: sp.name}, &sp.docSpan, docBatchSize)
		}, keep, limit, page, lastTime, lastRID)
	}
	return pageCalls(&sp.docSpan, func() ([]storedCall, bool, error) { return s.sessBatch(ctx, s.r, sp, docBatchSize) },
		keep, limit, page, lastTime, lastRID)
}
