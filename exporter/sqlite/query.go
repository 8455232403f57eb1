package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/store"
)

// scanPage is how many calls ScanCalls reads per read transaction, so
// that a slow fn never pins the log for long. Page sizes of the queries are
// store.PageLimit and store.TimelineLimit, shared with ClickHouse.
const scanPage = 1000

// Watermark returns the last committed watermark (zero if none).
func (s *Store) Watermark(ctx context.Context) (time.Time, error) {
	if s.closed.Load() {
		return time.Time{}, errClosed("read watermark")
	}
	var n int64
	err := s.r.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'watermark'`).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, s.fail("read watermark", err)
	}
	return fromNanos(n), nil
}

// NewestCall returns the time of the latest stored call (zero when none is
// stored): what serve's retention counts back from by default
// (serve.retention_from). Calls acknowledged from the call log and not yet
// committed are not counted; they are newer than the ones that are.
func (s *Store) NewestCall(ctx context.Context) (time.Time, error) {
	if s.closed.Load() {
		return time.Time{}, errClosed("read the newest call")
	}
	if s.opts.Calls == CallsLog {
		t, err := s.opts.CallLog.Newest(ctx)
		if err != nil {
			return time.Time{}, s.fail("read the newest call", err)
		}
		return t, nil
	}
	var n sql.NullInt64
	if err := s.r.QueryRowContext(ctx, `SELECT max(time) FROM calls`).Scan(&n); err != nil {
		return time.Time{}, s.fail("read the newest call", err)
	}
	if !n.Valid {
		return time.Time{}, nil
	}
	return fromNanos(n.Int64), nil
}

// ScanCalls calls fn with every stored call whose Time >= since, in time
// order (calls of equal time in the order they were stored). It reads in
// pages of its own transactions: calls appended during the scan with a time
// before the page being read are not seen. An error of fn stops the scan
// and is returned as is.
func (s *Store) ScanCalls(ctx context.Context, since time.Time, fn func(*audit.Record) error) error {
	if s.closed.Load() {
		return errClosed("scan calls")
	}
	if err := s.caughtUp(ctx, "scan calls"); err != nil {
		return err
	}
	if s.opts.Calls == CallsLog {
		return s.scanLogged(ctx, since, fn)
	}
	lastTime, lastRID := clampNanos(since), int64(-1)
	var buf []byte
	for {
		rows, err := s.r.QueryContext(ctx, `SELECT rid, id, time, rec FROM calls
			WHERE (time, rid) > (?, ?) ORDER BY time, rid LIMIT ?`, lastTime, lastRID, scanPage)
		if err != nil {
			return s.fail("scan calls", err)
		}
		var page []*audit.Record
		for rows.Next() {
			var id any
			var blob []byte
			if err := rows.Scan(&lastRID, &id, &lastTime, &blob); err != nil {
				rows.Close()
				return s.fail("scan calls", err)
			}
			rec := &audit.Record{}
			if buf, err = decodeCall(buf, id, lastTime, blob, rec); err != nil {
				rows.Close()
				return s.fail("scan calls", err)
			}
			page = append(page, rec)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return s.fail("scan calls", err)
		}
		// fn runs outside the read transaction.
		for _, c := range page {
			if err := fn(c); err != nil {
				return err
			}
		}
		if len(page) < scanPage {
			return nil
		}
	}
}

// decodeCall fills rec from a calls row; buf is a reusable buffer, returned
// grown.
func decodeCall(buf []byte, id any, t int64, blob []byte, rec *audit.Record) ([]byte, error) {
	raw, err := decompress(buf, blob)
	if err != nil {
		return buf, fmt.Errorf("call %s: %w", unpackID(callPrefix, id), err)
	}
	return raw, readCall(raw, id, t, rec)
}

// readCall decodes the record raw of the call with packed id and time t
// into rec (decodeCall after the decompression).
func readCall(raw []byte, id any, t int64, rec *audit.Record) error {
	rec.Call = &audit.Call{ID: unpackID(callPrefix, id), Time: fromNanos(t)}
	if err := readRecord(raw, rec); err != nil {
		return fmt.Errorf("call %s: %w", rec.Call.ID, err)
	}
	return nil
}

// FindingIDs returns the IDs of the findings whose Time >= since.
func (s *Store) FindingIDs(ctx context.Context, since time.Time) (map[string]bool, error) {
	if s.closed.Load() {
		return nil, errClosed("read finding ids")
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id FROM findings WHERE time >= ?`, clampNanos(since))
	if err != nil {
		return nil, s.fail("read finding ids", err)
	}
	defer rows.Close()
	ids := map[string]bool{}
	for rows.Next() {
		var id any
		if err := rows.Scan(&id); err != nil {
			return nil, s.fail("read finding ids", err)
		}
		ids[unpackID(findingPrefix, id)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("read finding ids", err)
	}
	return ids, nil
}

var _ audit.NewestFinder = (*Store)(nil)

// NewestFindings returns the newest finding time of each server and kind,
// newest first, at most limit (0: all). One pass over the findings, read
// once at start (serve seeds the last finding gauge with it).
func (s *Store) NewestFindings(ctx context.Context, limit int) ([]audit.FindingTime, error) {
	const op = "read the newest findings"
	if s.closed.Load() {
		return nil, errClosed(op)
	}
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.r.QueryContext(ctx, `SELECT server, kind, max(time) FROM findings GROUP BY server, kind ORDER BY 3 DESC, 1, 2 LIMIT ?`, limit)
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer rows.Close()
	var out []audit.FindingTime
	for rows.Next() {
		var ft audit.FindingTime
		var t int64
		if err := rows.Scan(&ft.Server, &ft.Kind, &t); err != nil {
			return nil, s.fail(op, err)
		}
		ft.Time = fromNanos(t)
		out = append(out, ft)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(op, err)
	}
	return out, nil
}

var _ audit.TooLateCounter = (*Store)(nil)

// CountTooLate counts the calls committed as too late to be judged, by
// tenant, in one pass over too_late's rows: no reference is made.
func (s *Store) CountTooLate(ctx context.Context) (map[string]int64, error) {
	if s.closed.Load() {
		return nil, errClosed("count the calls too late")
	}
	rows, err := s.r.QueryContext(ctx, `SELECT coalesce((SELECT s FROM strs WHERE strs.id = t.tenant), ''), t.n
		FROM (SELECT tenant, count(*) AS n FROM too_late GROUP BY tenant) AS t`)
	if err != nil {
		return nil, s.fail("count the calls too late", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var tenant string
		var n int64
		if err := rows.Scan(&tenant, &n); err != nil {
			return nil, s.fail("count the calls too late", err)
		}
		out[tenant] += n
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("count the calls too late", err)
	}
	return out, nil
}

// TooLateCalls returns the calls committed as too late to be judged whose
// Time >= since.
func (s *Store) TooLateCalls(ctx context.Context, since time.Time) ([]audit.CallRef, error) {
	if s.closed.Load() {
		return nil, errClosed("read the calls too late")
	}
	rows, err := s.r.QueryContext(ctx, `SELECT coalesce((SELECT s FROM strs WHERE strs.id = too_late.tenant), ''), call_id, time
		FROM too_late WHERE time >= ?`, clampNanos(since))
	if err != nil {
		return nil, s.fail("read the calls too late", err)
	}
	defer rows.Close()
	var out []audit.CallRef
	for rows.Next() {
		var tenant string
		var id any
		var t int64
		if err := rows.Scan(&tenant, &id, &t); err != nil {
			return nil, s.fail("read the calls too late", err)
		}
		out = append(out, audit.CallRef{Tenant: tenant, ID: unpackID(callPrefix, id), Time: fromNanos(t)})
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("read the calls too late", err)
	}
	return out, nil
}

// filter builds a WHERE clause.
type filter struct {
	conds []string
	args  []any
}

func (f *filter) add(cond string, args ...any) {
	f.conds = append(f.conds, cond)
	f.args = append(f.args, args...)
}

// eq adds column = v when v is set.
func (f *filter) eq(column, v string) {
	if v != "" {
		f.add(column+" = ?", v)
	}
}

// span adds since <= column < until for the bounds that are set.
func (f *filter) span(column string, since, until time.Time) {
	if !since.IsZero() {
		f.add(column+" >= ?", clampNanos(since))
	}
	if !until.IsZero() {
		f.add(column+" < ?", clampNanos(until))
	}
}

func (f *filter) where() string {
	if len(f.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(f.conds, " AND ")
}

// Cursors are opaque to clients: base64url of a kind byte, the time of the
// last row and its tie-breaker (the finding id, or the write's row id).
const (
	cursorFindings = 'f'
	cursorNewest   = 'n' // findings, newest first
	cursorWrites   = 'w'
)

func makeCursor(kind byte, t int64, tie []byte) string {
	b := []byte{kind}
	b = binary.AppendVarint(b, t)
	b = append(b, tie...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func readCursor(kind byte, c string) (t int64, tie []byte, err error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) < 2 || b[0] != kind {
		return 0, nil, audit.ErrBadCursor
	}
	t, n := binary.Varint(b[1:])
	if n <= 0 {
		return 0, nil, audit.ErrBadCursor
	}
	return t, b[1+n:], nil
}

// Findings returns one page of findings in time order, then id order (or
// the reverse with Newest), each with its lifecycle status. Limit defaults
// to 100 and is capped at 1000. A cursor not made by Findings in the same
// order returns an error wrapping audit.ErrBadCursor.
func (s *Store) Findings(ctx context.Context, q audit.FindingQuery) (audit.FindingPage, error) {
	if s.closed.Load() {
		return audit.FindingPage{}, errClosed("read findings")
	}
	f := findingFilter(q)
	kind, cmpOp, order := byte(cursorFindings), ">", "time, id"
	if q.Newest {
		kind, cmpOp, order = cursorNewest, "<", "time DESC, id DESC"
	}
	if q.Cursor != "" {
		t, id, err := readCursor(kind, q.Cursor)
		if err != nil || len(id) == 0 {
			return audit.FindingPage{}, s.fail("read findings", audit.ErrBadCursor)
		}
		f.add("(time, id) "+cmpOp+" (?, ?)", t, packID(findingPrefix, string(id)))
	}
	limit := store.PageLimit(q.Limit)
	rows, err := s.r.QueryContext(ctx, `SELECT `+findingColumns+statusColumns+findingFrom+f.where()+
		` ORDER BY `+order+` LIMIT ?`, append(f.args, limit+1)...)
	if err != nil {
		return audit.FindingPage{}, s.fail("read findings", err)
	}
	defer rows.Close()
	page := audit.FindingPage{Findings: []audit.Finding{}}
	var lastID string
	var lastTime int64
	for rows.Next() {
		if len(page.Findings) == limit {
			page.NextCursor = makeCursor(kind, lastTime, []byte(lastID))
			break
		}
		var st statusScan
		fd, err := scanFinding(rows, &lastID, &lastTime, st.dest()...)
		if err != nil {
			return audit.FindingPage{}, s.fail("read findings", err)
		}
		fd.Status = st.status()
		page.Findings = append(page.Findings, fd)
	}
	if err := rows.Err(); err != nil {
		return audit.FindingPage{}, s.fail("read findings", err)
	}
	return page, nil
}

// findingBody is the part of a finding that is not in columns.
type findingBody struct {
	Severity    audit.Severity    `json:"severity"`
	Calls       []string          `json:"calls"`
	Reason      audit.Reason      `json:"reason,omitempty"`
	RetryAction audit.RetryAction `json:"retry_action,omitempty"`
	Summary     string            `json:"summary"`
}

const findingColumns = `id, time, kind, server, tenant, document, key, session, body`

// scanFinding reads a row of findingColumns; id and t receive the row's id
// and time.
func scanFinding(rows *sql.Rows, id *string, t *int64, extra ...any) (audit.Finding, error) {
	var f audit.Finding
	var body []byte
	var packed any
	dest := append([]any{&packed, t, &f.Kind, &f.Server, &f.Tenant, &f.Document, &f.Key, &f.Session, &body}, extra...)
	if err := rows.Scan(dest...); err != nil {
		return f, err
	}
	*id = unpackID(findingPrefix, packed)
	var b findingBody
	raw, err := decompress(nil, body)
	if err == nil {
		err = json.Unmarshal(raw, &b)
	}
	if err != nil {
		return f, fmt.Errorf("finding %s: %w", *id, err)
	}
	f.Time = fromNanos(*t)
	f.Severity, f.Calls, f.Reason, f.RetryAction, f.Summary = b.Severity, b.Calls, b.Reason, b.RetryAction, b.Summary
	return f, nil
}

// str reads an interned column.
func str(column string) string {
	return `coalesce((SELECT s FROM strs WHERE id = ` + column + `), '')`
}

// internedEq adds column = the number of v when v is set; an unknown v
// matches nothing.
func (f *filter) internedEq(column, v string) {
	if v != "" {
		f.add(column+" = coalesce((SELECT id FROM strs WHERE s = ?), -1)", v)
	}
}

var writeColumns = `time, call_id, seq, ` + str("state") + `, ` + str("server") + `, ` + str("tenant") +
	`, ` + str("tool") + `, ` + str("reason") + `, ` + str("action") + `, session, document, key, state_after`

func scanWrite(rows *sql.Rows) (audit.Write, error) {
	var w audit.Write
	var id any
	var t int64
	var after sql.NullInt64
	var state, reason, action string
	err := rows.Scan(&t, &id, &w.Seq, &state, &w.Server, &w.Tenant, &w.Tool, &reason, &action,
		&w.Session, &w.Document, &w.Key, &after)
	w.CallID = unpackID(callPrefix, id)
	w.Time = fromNanos(t)
	if after.Valid {
		w.StateTime = fromNanos(t + after.Int64)
	}
	w.State, w.Reason, w.Action = audit.WriteState(state), audit.Reason(reason), audit.RetryAction(action)
	return w, err
}

// Writes returns one page of write attempts with their current state, in
// time order (then call id and sequence order). Limit defaults to 100 and is capped at
// 1000.
func (s *Store) Writes(ctx context.Context, q audit.WriteQuery) (audit.WritePage, error) {
	if s.closed.Load() {
		return audit.WritePage{}, errClosed("read writes")
	}
	var f filter
	if id, ok := s.inv.bad[q.State]; ok {
		// A literal: the state's partial index then serves the query.
		f.add(fmt.Sprintf("state = %d", id))
	} else {
		f.internedEq("state", string(q.State))
	}
	f.internedEq("server", q.Server)
	f.internedEq("tenant", q.Tenant)
	f.eq("document", q.Document)
	f.eq("session", q.Session)
	f.span("time", q.Since, q.Until)
	if q.Cursor != "" {
		t, tie, err := readCursor(cursorWrites, q.Cursor)
		seq, n := binary.Varint(tie)
		if err != nil || n <= 0 || n == len(tie) {
			return audit.WritePage{}, s.fail("read writes", audit.ErrBadCursor)
		}
		f.add("(time, call_id, seq) > (?, ?, ?)", t, packID(callPrefix, string(tie[n:])), seq)
	}
	limit := store.PageLimit(q.Limit)
	rows, err := s.r.QueryContext(ctx, `SELECT `+writeColumns+` FROM writes`+f.where()+
		` ORDER BY time, call_id, seq LIMIT ?`, append(f.args, limit+1)...)
	if err != nil {
		return audit.WritePage{}, s.fail("read writes", err)
	}
	defer rows.Close()
	page := audit.WritePage{Writes: []audit.Write{}}
	for rows.Next() {
		if len(page.Writes) == limit {
			last := &page.Writes[limit-1]
			tie := binary.AppendVarint(nil, int64(last.Seq))
			page.NextCursor = makeCursor(cursorWrites, clampNanos(last.Time), append(tie, last.CallID...))
			break
		}
		w, err := scanWrite(rows)
		if err != nil {
			return audit.WritePage{}, s.fail("read writes", err)
		}
		page.Writes = append(page.Writes, w)
	}
	if err := rows.Err(); err != nil {
		return audit.WritePage{}, s.fail("read writes", err)
	}
	return page, nil
}

// WriteCounts counts the write attempts whose Time is in [Since, Until) by
// their current state. Whole hours of the range are read from the
// write_hours rollup (investigate.go), the partial hours at its ends from
// the writes themselves, in one read transaction.
func (s *Store) WriteCounts(ctx context.Context, q audit.CountQuery) (map[audit.WriteState]int64, error) {
	if s.closed.Load() {
		return nil, errClosed("count writes")
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, s.fail("count writes", err)
	}
	defer tx.Rollback()
	counts := map[audit.WriteState]int64{}
	add := func(query string, args []any) error {
		return addStateCounts(ctx, tx, counts, query, args)
	}
	scan := func(since, until time.Time) error {
		var f filter
		f.internedEq("server", q.Server)
		f.internedEq("tenant", q.Tenant)
		f.span("time", since, until)
		return add(`SELECT `+str("state")+`, count(*) FROM writes`+f.where()+` GROUP BY state`, f.args)
	}
	lo, hi, whole := wholeHours(q.Since, q.Until)
	if !whole {
		err = scan(q.Since, q.Until)
	} else {
		var f filter
		f.internedEq("server", q.Server)
		f.internedEq("tenant", q.Tenant)
		if !q.Since.IsZero() {
			f.add("hour >= ?", lo)
		}
		if !q.Until.IsZero() {
			f.add("hour < ?", hi)
		}
		err = add(`SELECT `+str("state")+`, sum(n) FROM write_hours`+f.where()+` GROUP BY state`, f.args)
		if err == nil && !q.Since.IsZero() {
			err = scan(q.Since, time.Unix(0, lo*hourNanos))
		}
		if err == nil && !q.Until.IsZero() {
			err = scan(time.Unix(0, hi*hourNanos), q.Until)
		}
	}
	if err != nil {
		return nil, s.fail("count writes", err)
	}
	return counts, nil
}

// Timeline returns the history of one document in time order: its calls
// (with outcome, failure code and retry action), the write attempts on it
// (each with its current state, at the time of its call) and its findings
// but those withdrawn.
// Events of equal time come calls first, then writes, then findings. The
// writes are found through the document's stored calls, so a write whose
// call was not appended is not shown. Limit defaults to 1000 and is capped
// at 10000; the first events in time order are returned, and the page says
// when the range held more.
func (s *Store) Timeline(ctx context.Context, q audit.TimelineQuery) (audit.TimelinePage, error) {
	if s.closed.Load() {
		return audit.TimelinePage{}, errClosed("read timeline")
	}
	if err := s.caughtUp(ctx, "read timeline"); err != nil {
		return audit.TimelinePage{}, err
	}
	if q.Document == "" {
		return audit.TimelinePage{}, errors.New("cannot read timeline: no document given")
	}
	limit := store.TimelineLimit(q.Limit)
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return audit.TimelinePage{}, s.fail("read timeline", err)
	}
	defer tx.Rollback()

	calls, next, truncated, err := s.timelineCalls(ctx, tx, q, limit)
	if err != nil {
		return audit.TimelinePage{}, s.fail("read timeline", err)
	}
	events := make([]audit.TimelineEvent, 0, len(calls))
	for _, r := range calls {
		events = append(events, store.TimelineCallEvent(r.Call, r.Outcome, r.Failure, q.Document))
	}
	writes, err := timelineWrites(ctx, tx, calls, q.Document)
	if err != nil {
		return audit.TimelinePage{}, s.fail("read timeline", err)
	}
	for i := range writes {
		events = append(events, store.WriteEvent(&writes[i]))
	}
	var f filter
	f.add("document = ?", q.Document)
	f.eq("server", q.Server)
	f.eq("tenant", q.Tenant)
	until := q.Until
	var leftOut []time.Time
	if truncated {
		// The calls stop at the limit: findings past the last call would
		// leave a gap before them.
		until = calls[len(calls)-1].Call.Time.Add(1)
		leftOut = append(leftOut, next, until)
	}
	f.span("time", q.Since, until)
	// A withdrawn finding is left out, as GET /api/v1/findings leaves it
	// out: the collector took it back.
	f.add("(fstate IS NULL OR fstate != ?)", string(audit.FindingWithdrawn))
	// One finding more than the limit: CutTimeline cuts it, and so knows
	// that more followed.
	rows, err := tx.QueryContext(ctx, `SELECT `+findingColumns+findingFrom+f.where()+` ORDER BY time, id LIMIT ?`,
		append(f.args, limit+1)...)
	if err != nil {
		return audit.TimelinePage{}, s.fail("read timeline", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var t int64
		fd, err := scanFinding(rows, &id, &t)
		if err != nil {
			return audit.TimelinePage{}, s.fail("read timeline", err)
		}
		events = append(events, store.FindingEvent(&fd))
	}
	if err := rows.Err(); err != nil {
		return audit.TimelinePage{}, s.fail("read timeline", err)
	}
	return store.CutTimeline(events, limit, leftOut...), nil
}

// timelineCalls returns up to limit calls on the document, in time order,
// and whether more were left out, with the time of the first of those.
func (s *Store) timelineCalls(ctx context.Context, tx *sql.Tx, q audit.TimelineQuery, limit int) ([]audit.Record, time.Time, bool, error) {
	sp := docSpan{name: q.Document, dh: docHash(q.Document), time: zeroTime, rid: -1, unbounded: q.Until.IsZero()}
	if !q.Since.IsZero() {
		sp.time = clampNanos(q.Since)
	}
	if !sp.unbounded {
		sp.until = clampNanos(q.Until)
	}
	var out []audit.Record
	var buf []byte
	for {
		rows, done, err := s.docBatch(ctx, tx, &sp, min(limit+1, docBatchSize))
		if err != nil {
			return nil, time.Time{}, false, err
		}
		for _, row := range rows {
			var rec audit.Record
			if buf, err = decodeCall(buf, row.id, row.time, row.blob, &rec); err != nil {
				return nil, time.Time{}, false, err
			}
			c := rec.Call
			if !slices.Contains(rec.Documents(), q.Document) ||
				(q.Server != "" && c.Server != q.Server) || (q.Tenant != "" && c.Tenant != q.Tenant) {
				continue // another document of the same hash, or filtered out
			}
			if len(out) == limit {
				return out, c.Time, true, nil
			}
			out = append(out, rec)
		}
		if done {
			return out, time.Time{}, false, nil
		}
	}
}

// timelineWrites returns the writes on doc made by the given calls.
func timelineWrites(ctx context.Context, tx *sql.Tx, calls []audit.Record, doc string) ([]audit.Write, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	// The call's own writes: those of its id and tenant, at its time (the
	// primary key's first column). A call at the epoch's first nanosecond
	// has its writes one nanosecond later (the detector keeps 0 for no
	// time).
	stmt, err := tx.PrepareContext(ctx, `SELECT `+writeColumns+` FROM writes WHERE time >= ?3 AND time <= ?3 + 1
		AND call_id = ?1 AND tenant = CASE WHEN ?2 = '' THEN 0 ELSE coalesce((SELECT id FROM strs WHERE s = ?2), -1) END`)
	if err != nil {
		return nil, err
	}
	defer stmt.Close()
	var out []audit.Write
	for _, r := range calls {
		first := len(out)
		t, _ := nanos(r.Call.Time) // stored, so in range
		rows, err := stmt.QueryContext(ctx, packID(callPrefix, r.Call.ID), r.Call.Tenant, t)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			w, err := scanWrite(rows)
			if err != nil {
				rows.Close()
				return nil, err
			}
			if w.Document == doc {
				out = append(out, w)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		// By seq: the key orders them so at one time only.
		slices.SortStableFunc(out[first:], func(a, b audit.Write) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	return out, nil
}

// addStateCounts adds to counts the rows of query, each a state and a
// count.
func addStateCounts(ctx context.Context, tx *sql.Tx, counts map[audit.WriteState]int64, query string, args []any) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return err
		}
		if n != 0 {
			counts[audit.WriteState(state)] += n
		}
	}
	return rows.Err()
}
