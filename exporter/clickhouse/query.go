package clickhouse

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/store"
)

// inChunk bounds the values of one IN list, to stay far below the
// server's max_query_size. Page sizes are store.PageLimit and
// store.TimelineLimit, shared with the embedded store.
const inChunk = 1000

// quote renders s as a ClickHouse string literal. Every value put into a
// query goes through quote or a number format: no server-side parameters
// exist on every supported server.
func quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case 0:
			b.WriteString(`\0`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return "(" + strings.Join(q, ", ") + ")"
}

// timeAtOrAfter and timeBefore compare the (time, time_nanos) columns with
// t. The first term alone lets the server skip partitions and granules.
func timeAtOrAfter(t time.Time) string {
	sec, ns := clampTime(t)
	return fmt.Sprintf("time >= toDateTime(%d) AND (time > toDateTime(%d) OR time_nanos >= %d)", sec, sec, ns)
}

func timeBefore(t time.Time) string {
	sec, ns := clampTime(t)
	return fmt.Sprintf("time <= toDateTime(%d) AND (time < toDateTime(%d) OR time_nanos < %d)", sec, sec, ns)
}

// clampTime is splitTime for bounds: a bound outside what DateTime holds is
// moved to its edge.
func clampTime(t time.Time) (int64, uint32) {
	switch {
	case t.Before(time.Unix(0, 0)):
		return 0, 0
	case t.After(maxTime):
		return maxTime.Unix(), uint32(maxTime.Nanosecond())
	}
	return t.Unix(), uint32(t.Nanosecond())
}

// conds collects the conditions of a WHERE clause.
type conds []string

func (c *conds) eq(col, v string) {
	if v != "" {
		*c = append(*c, col+" = "+quote(v))
	}
}

func (c *conds) span(since, until time.Time) {
	if !since.IsZero() {
		*c = append(*c, timeAtOrAfter(since))
	}
	if !until.IsZero() {
		*c = append(*c, timeBefore(until))
	}
}

func (c conds) where() string {
	if len(c) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(c, " AND ")
}

// cursor is the position after the last row of a page.
type cursor struct {
	Time  int64  `json:"t"`
	Nanos uint32 `json:"n"`
	ID    string `json:"i"`
	Seq   int32  `json:"s,omitempty"`
	// Newest marks a cursor of findings newest first.
	Newest bool `json:"d,omitempty"`
}

func (c cursor) String() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseCursor(s string) (cursor, error) {
	var c cursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil || c.ID == "" {
		return c, fmt.Errorf("cannot read cursor %q: %w", s, audit.ErrBadCursor)
	}
	return c, nil
}

// after is the condition "(time, time_nanos, idCol[, seq]) > c".
func (c cursor) after(idCol string, withSeq bool) string {
	tail := fmt.Sprintf("%s > %s", idCol, quote(c.ID))
	if withSeq {
		tail = fmt.Sprintf("(%s OR (%s = %s AND seq > %d))", tail, idCol, quote(c.ID), c.Seq)
	}
	return fmt.Sprintf("time >= toDateTime(%d) AND (time > toDateTime(%d) OR time_nanos > %d OR (time_nanos = %d AND %s))",
		c.Time, c.Time, c.Nanos, c.Nanos, tail)
}

// The select lists name the columns in the order the rows hold them.
var (
	findingSelect = strings.Join(findingColumns, ", ")
	writeSelect   = strings.Join(writeColumns, ", ")
	callSelect    = strings.Join(callColumns, ", ")
)

func scanFinding(rows driver.Rows) (findingRow, error) {
	var r findingRow
	var t time.Time
	err := rows.Scan(&r.Tenant, &r.Server, &r.Document, &t, &r.TimeNanos, &r.ID, &r.Kind, &r.Severity,
		&r.Key, &r.Session, &r.Calls, &r.Reason, &r.RetryAction, &r.Summary, &r.Version, &r.Chain)
	r.Time = t.Unix()
	return r, err
}

func scanWrite(rows driver.Rows) (writeRow, error) {
	var r writeRow
	var t time.Time
	err := rows.Scan(&r.Tenant, &r.Server, &r.Document, &t, &r.TimeNanos, &r.CallID, &r.Seq, &r.Session,
		&r.Tool, &r.Key, &r.State, &r.Reason, &r.Action, &r.StateDelay, &r.Version)
	r.Time = t.Unix()
	return r, err
}

func scanCall(rows driver.Rows) (callRow, error) {
	var r callRow
	var t time.Time
	err := rows.Scan(&r.Tenant, &r.Server, &r.Document, &t, &r.TimeNanos, &r.ID, &r.OtherDocuments, &r.DurationNS,
		&r.Session, &r.Client, &r.TraceID, &r.SpanID, &r.Fingerprint, &r.RPCID, &r.Method, &r.Tool, &r.ToolLabel,
		&r.Arguments, &r.Result, &r.ErrorCode, &r.ErrorMessage, &r.ErrorData, &r.TransportError,
		&r.Source, &r.Outcome, &r.FailureCode, &r.FailureAction, &r.FailureMessage, &r.Reading, &r.Flags, &r.Version, &r.Chain)
	r.Time = t.Unix()
	return r, err
}

// each runs query and calls fn for every row.
func each(ctx context.Context, conn driver.Conn, op, query string, fn func(driver.Rows) error) error {
	rows, err := conn.Query(ctx, query)
	if err != nil {
		return queryErr(ctx, op, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return queryErr(ctx, op, rows.Err())
}

// severitiesFrom lists sev and the severities above it.
func severitiesFrom(sev audit.Severity) []string {
	var out []string
	for _, s := range []audit.Severity{audit.SeverityInfo, audit.SeverityWarning, audit.SeverityCritical} {
		if s.Rank() >= sev.Rank() {
			out = append(out, string(s))
		}
	}
	return out
}

// Findings returns one page of findings in (time, ID) order, or newest
// first, each with its lifecycle status.
func (s *Store) Findings(ctx context.Context, q audit.FindingQuery) (audit.FindingPage, error) {
	page := audit.FindingPage{Findings: []audit.Finding{}}
	conn, err := s.settledReader(ctx)
	if err != nil {
		return page, err
	}
	if q.Newest {
		return s.findingsNewest(ctx, conn, q)
	}
	c := s.findingConds(q)
	if q.Cursor != "" {
		cur, err := parseCursor(q.Cursor)
		if err != nil {
			return page, err
		}
		if cur.Newest {
			return page, fmt.Errorf("cannot read cursor %q: %w", q.Cursor, audit.ErrBadCursor)
		}
		c = append(c, cur.after("id", false))
	}
	limit := store.PageLimit(q.Limit)
	query := fmt.Sprintf("SELECT %s FROM %s FINAL%s ORDER BY time, time_nanos, id LIMIT %d",
		findingSelect, s.layout.table("findings"), c.where(), limit+1)
	var last findingRow
	err = each(ctx, conn, "query findings", query, func(rows driver.Rows) error {
		r, err := scanFinding(rows)
		if err != nil {
			return queryErr(ctx, "read findings", err)
		}
		if len(page.Findings) == limit {
			page.NextCursor = cursor{Time: last.Time, Nanos: last.TimeNanos, ID: last.ID}.String()
			return nil
		}
		page.Findings = append(page.Findings, r.finding())
		last = r
		return nil
	})
	if err != nil {
		return page, err
	}
	return page, s.addStatuses(ctx, conn, page.Findings)
}

// Writes returns one page of write attempts, each in its latest state, in
// (time, call ID, seq) order.
func (s *Store) Writes(ctx context.Context, q audit.WriteQuery) (audit.WritePage, error) {
	page := audit.WritePage{Writes: []audit.Write{}}
	conn, err := s.settledReader(ctx)
	if err != nil {
		return page, err
	}
	// The identity columns filter inside FINAL; the state, which changes,
	// only after FINAL picked the latest version.
	var inner conds
	inner.eq("server", q.Server)
	inner.eq("tenant", q.Tenant)
	inner.eq("document", q.Document)
	inner.eq("session", q.Session)
	inner.span(q.Since, q.Until)
	var outer conds
	outer.eq("state", string(q.State))
	if q.Cursor != "" {
		cur, err := parseCursor(q.Cursor)
		if err != nil {
			return page, err
		}
		outer = append(outer, cur.after("call_id", true))
	}
	limit := store.PageLimit(q.Limit)
	query := fmt.Sprintf("SELECT %s FROM (SELECT %s FROM %s FINAL%s)%s ORDER BY time, time_nanos, call_id, seq LIMIT %d",
		writeSelect, writeSelect, s.layout.table("writes"), inner.where(), outer.where(), limit+1)
	var last writeRow
	err = each(ctx, conn, "query writes", query, func(rows driver.Rows) error {
		r, err := scanWrite(rows)
		if err != nil {
			return queryErr(ctx, "read writes", err)
		}
		if len(page.Writes) == limit {
			page.NextCursor = cursor{Time: last.Time, Nanos: last.TimeNanos, ID: last.CallID, Seq: last.Seq}.String()
			return nil
		}
		page.Writes = append(page.Writes, r.write())
		last = r
		return nil
	})
	return page, err
}

// Timeline returns the calls on one document, the write attempts those
// calls made on it (each at its Time, in its latest state) and the findings
// on it but those withdrawn, in time order; at equal times calls come
// first, then writes, then findings. When the calls fill the limit, findings after the last call are
// left out too, so that the timeline has no gap; the page says when the
// range held more.
func (s *Store) Timeline(ctx context.Context, q audit.TimelineQuery) (audit.TimelinePage, error) {
	conn, err := s.settledReader(ctx)
	if err != nil {
		return audit.TimelinePage{}, err
	}
	if q.Document == "" {
		return audit.TimelinePage{}, fmt.Errorf("cannot read a timeline: no document given")
	}
	limit := store.TimelineLimit(q.Limit)
	var base conds
	base.eq("tenant", q.Tenant)
	base.eq("server", q.Server)

	var events []audit.TimelineEvent
	var calls []callRow
	callConds := append(slices.Clone(base), "has(arrayPushFront(other_documents, document), "+quote(q.Document)+")")
	callConds.span(q.Since, q.Until)
	query := fmt.Sprintf("SELECT %s FROM %s FINAL%s ORDER BY time, time_nanos, id LIMIT %d",
		callSelect, s.layout.table("calls"), callConds.where(), limit+1)
	err = each(ctx, conn, "query the timeline", query, func(rows driver.Rows) error {
		r, err := scanCall(rows)
		if err != nil {
			return queryErr(ctx, "read the timeline", err)
		}
		calls = append(calls, r)
		return nil
	})
	if err != nil {
		return audit.TimelinePage{}, err
	}
	truncated := len(calls) > limit
	var next time.Time // the first call left out
	if truncated {
		next = joinTime(calls[limit].Time, calls[limit].TimeNanos)
		calls = calls[:limit]
	}
	ids := make([]string, 0, len(calls))
	made := make(map[callKey]bool, len(calls)) // a write is its call's: same id and tenant
	for i := range calls {
		r := &calls[i]
		made[callKey{r.Tenant, r.ID}] = true
		var failure *audit.Failure
		if r.Flags&flagFailure != 0 {
			failure = &audit.Failure{Code: r.FailureCode, Action: audit.RetryAction(r.FailureAction)}
		}
		c := audit.Call{ID: r.ID, Time: joinTime(r.Time, r.TimeNanos), Server: r.Server, Session: r.Session, Tool: r.Tool, Source: r.Source}
		// The payloads, for what they say of the document's revision.
		if r.Flags&flagArguments != 0 {
			c.Arguments = []byte(r.Arguments)
		}
		if r.Flags&flagResult != 0 {
			c.Result = []byte(r.Result)
		}
		events = append(events, store.TimelineCallEvent(&c, audit.Outcome(r.Outcome), failure, q.Document))
		ids = append(ids, r.ID)
	}

	// The writes those calls made on the document: a write has its call's
	// time, which bounds the search.
	if len(calls) > 0 {
		lo, hi := calls[0], calls[len(calls)-1]
		var wc conds
		wc.eq("document", q.Document)
		wc.eq("tenant", q.Tenant)
		wc = append(wc, fmt.Sprintf("time >= toDateTime(%d) AND time <= toDateTime(%d)", lo.Time, hi.Time))
		for i := 0; i < len(ids); i += inChunk {
			part := append(slices.Clone(wc), "call_id IN "+quoteList(ids[i:min(i+inChunk, len(ids))]))
			query := fmt.Sprintf("SELECT %s FROM %s FINAL%s ORDER BY call_id, seq", writeSelect, s.layout.table("writes"), part.where())
			err = each(ctx, conn, "query the timeline", query, func(rows driver.Rows) error {
				r, err := scanWrite(rows)
				if err != nil {
					return queryErr(ctx, "read the timeline", err)
				}
				w := r.write()
				if !made[callKey{w.Tenant, w.CallID}] {
					return nil // another tenant's write under the same call id
				}
				events = append(events, store.WriteEvent(&w))
				return nil
			})
			if err != nil {
				return audit.TimelinePage{}, err
			}
		}
	}

	fc := append(slices.Clone(base), "document = "+quote(q.Document))
	until := q.Until
	var leftOut []time.Time
	if truncated {
		until = joinTime(calls[len(calls)-1].Time, calls[len(calls)-1].TimeNanos).Add(1)
		leftOut = append(leftOut, next, until)
	}
	fc.span(q.Since, until)
	// A withdrawn finding is left out, as GET /api/v1/findings leaves it
	// out: the collector took it back.
	fc = append(fc, "id NOT IN (SELECT finding_id FROM ("+s.latestStates("")+") WHERE st = "+quote(string(audit.FindingWithdrawn))+")")
	// One finding more than the limit: CutTimeline cuts it, and so knows
	// that more followed.
	query = fmt.Sprintf("SELECT %s FROM %s FINAL%s ORDER BY time, time_nanos, id LIMIT %d",
		findingSelect, s.layout.table("findings"), fc.where(), limit+1)
	err = each(ctx, conn, "query the timeline", query, func(rows driver.Rows) error {
		r, err := scanFinding(rows)
		if err != nil {
			return queryErr(ctx, "read the timeline", err)
		}
		f := r.finding()
		events = append(events, store.FindingEvent(&f))
		return nil
	})
	if err != nil {
		return audit.TimelinePage{}, err
	}
	return store.CutTimeline(events, limit, leftOut...), nil
}

// WriteCounts counts write attempts by their latest state.
func (s *Store) WriteCounts(ctx context.Context, q audit.CountQuery) (map[audit.WriteState]int64, error) {
	conn, err := s.settledReader(ctx)
	if err != nil {
		return nil, err
	}
	var c conds
	c.eq("server", q.Server)
	c.eq("tenant", q.Tenant)
	c.span(q.Since, q.Until)
	query := fmt.Sprintf("SELECT state, count() FROM (SELECT state FROM %s FINAL%s) GROUP BY state",
		s.layout.table("writes"), c.where())
	s.commitMu.RLock()
	defer s.commitMu.RUnlock()
	counts := map[audit.WriteState]int64{}
	err = each(ctx, conn, "count writes", query, func(rows driver.Rows) error {
		var state string
		var n uint64
		if err := rows.Scan(&state, &n); err != nil {
			return queryErr(ctx, "count writes", err)
		}
		counts[audit.WriteState(state)] = int64(n)
		return nil
	})
	return counts, err
}

// TooLateCalls returns the calls committed as too late to be judged whose
// Time >= since. It first waits for the spool to drain, as ScanCalls does.
func (s *Store) TooLateCalls(ctx context.Context, since time.Time) ([]audit.CallRef, error) {
	conn, err := s.settledReader(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.waitDrained(ctx); err != nil {
		return nil, err
	}
	var c conds
	c.span(since, time.Time{})
	s.commitMu.RLock()
	defer s.commitMu.RUnlock()
	var out []audit.CallRef
	err = each(ctx, conn, "query the calls too late", "SELECT tenant, call_id, time, time_nanos FROM "+s.layout.table("too_late")+" FINAL"+c.where(), func(rows driver.Rows) error {
		var tenant, id string
		var t time.Time
		var ns uint32
		if err := rows.Scan(&tenant, &id, &t, &ns); err != nil {
			return queryErr(ctx, "read the calls too late", err)
		}
		out = append(out, audit.CallRef{Tenant: tenant, ID: id, Time: joinTime(t.Unix(), ns)})
		return nil
	})
	return out, err
}

var _ audit.TooLateCounter = (*Store)(nil)

// CountTooLate counts the calls committed as too late to be judged, by
// tenant, with FINAL as TooLateCalls reads them (a call named by two
// commits is one row), after the spool drained.
func (s *Store) CountTooLate(ctx context.Context) (map[string]int64, error) {
	conn, err := s.settledReader(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.waitDrained(ctx); err != nil {
		return nil, err
	}
	s.commitMu.RLock()
	defer s.commitMu.RUnlock()
	out := map[string]int64{}
	err = each(ctx, conn, "count the calls too late", "SELECT tenant, count() FROM "+s.layout.table("too_late")+" FINAL GROUP BY tenant", func(rows driver.Rows) error {
		var tenant string
		var n uint64
		if err := rows.Scan(&tenant, &n); err != nil {
			return queryErr(ctx, "read the count of the calls too late", err)
		}
		out[tenant] += int64(n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// FindingIDs returns the IDs of the findings whose Time >= since.
func (s *Store) FindingIDs(ctx context.Context, since time.Time) (map[string]bool, error) {
	conn, err := s.settledReader(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.waitDrained(ctx); err != nil {
		return nil, err
	}
	var c conds
	c.span(since, time.Time{})
	s.commitMu.RLock()
	defer s.commitMu.RUnlock()
	ids := map[string]bool{}
	err = each(ctx, conn, "query finding ids", "SELECT DISTINCT id FROM "+s.layout.table("findings")+c.where(), func(rows driver.Rows) error {
		var id string
		if err := rows.Scan(&id); err != nil {
			return queryErr(ctx, "read finding ids", err)
		}
		ids[id] = true
		return nil
	})
	return ids, err
}

var _ audit.NewestFinder = (*Store)(nil)

// NewestFindings returns the newest finding time of each server and kind,
// newest first, at most limit (0: all), grouped by the server. It first
// waits for the spool to drain, as FindingIDs does.
func (s *Store) NewestFindings(ctx context.Context, limit int) ([]audit.FindingTime, error) {
	conn, err := s.settledReader(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.waitDrained(ctx); err != nil {
		return nil, err
	}
	query := "SELECT server, kind, max(toUInt64(time) * 1000000000 + time_nanos) AS t FROM " + s.layout.table("findings") +
		" GROUP BY server, kind ORDER BY t DESC, server, kind"
	if limit > 0 {
		query += fmt.Sprintf(" LIMIT %d", limit)
	}
	s.commitMu.RLock()
	defer s.commitMu.RUnlock()
	var out []audit.FindingTime
	err = each(ctx, conn, "query newest findings", query, func(rows driver.Rows) error {
		var server, kind string
		var t uint64
		if err := rows.Scan(&server, &kind, &t); err != nil {
			return queryErr(ctx, "read newest findings", err)
		}
		out = append(out, audit.FindingTime{Server: server, Kind: audit.Kind(kind), Time: time.Unix(0, int64(t)).UTC()})
		return nil
	})
	return out, err
}

// ScanCalls calls fn with every stored call whose Time >= since, in (time,
// ID) order. It first waits for the spool to drain, so that every
// acknowledged call is seen.
//
// A query the server refuses for its memory limit (code 241) before any
// row came is logged and asked again with backoff until ctx ends: serve
// exited 2 at start on it (adv23's D3), where the limit is the server's to
// raise, without a restart (docs/clickhouse.md, "Start-up replay").
func (s *Store) ScanCalls(ctx context.Context, since time.Time, fn func(*audit.Record) error) error {
	conn, err := s.settledReader(ctx)
	if err != nil {
		return err
	}
	if err := s.waitDrained(ctx); err != nil {
		return err
	}
	var c conds
	c.span(since, time.Time{})
	query := fmt.Sprintf("SELECT %s FROM %s FINAL%s ORDER BY time, time_nanos, id", callSelect, s.layout.table("calls"), c.where())
	wait := time.Second
	for {
		got := 0
		err := each(ctx, conn, "scan calls", query, func(rows driver.Rows) error {
			got++
			r, err := scanCall(rows)
			if err != nil {
				return queryErr(ctx, "read calls", err)
			}
			return fn(r.record())
		})
		if err == nil || got > 0 || !memoryLimited(err) {
			return err
		}
		if err := s.waitMemory(ctx, &wait, err); err != nil {
			return err
		}
	}
}

// waitMemory logs that the server refused a query of the replay for its
// memory limit (err) and waits *wait, doubled for the next time (at most 30
// s), or until ctx ends.
func (s *Store) waitMemory(ctx context.Context, wait *time.Duration, err error) error {
	s.log.Warn("clickhouse: the server refuses the start-up replay's query of the stored calls for its memory limit for a query; "+
		"waiting and asking again: raise max_memory_usage in the profile of mcpaudit's ClickHouse user (docs/clickhouse.md#start-up-replay)",
		"retry_in", *wait, "err", err)
	select {
	case <-ctx.Done():
		return fmt.Errorf("cannot scan calls: %w (%w)", ctx.Err(), err)
	case <-time.After(*wait):
	}
	*wait = min(2**wait, 30*time.Second)
	return nil
}

// Watermark returns the last committed watermark of this replica.
func (s *Store) Watermark(ctx context.Context) (time.Time, error) {
	conn, err := s.reader() // the watermark is known here once acknowledged
	if err != nil && !errors.Is(err, audit.ErrUnavailable) {
		return time.Time{}, err
	}
	s.commitMu.RLock()
	defer s.commitMu.RUnlock()
	s.mu.Lock()
	wm, known := s.wm, s.wmVersion > 0
	s.mu.Unlock()
	if known {
		return wm, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	var t time.Time
	var ns uint32
	var found bool
	query := "SELECT time, time_nanos FROM " + s.layout.table("watermarks") + " FINAL WHERE replica = " + quote(s.opts.Replica)
	err = each(ctx, conn, "read the watermark", query, func(rows driver.Rows) error {
		found = true
		return queryErr(ctx, "read the watermark", rows.Scan(&t, &ns))
	})
	if err != nil || !found {
		return time.Time{}, err
	}
	return joinTime(t.Unix(), ns), nil
}

// DeleteBefore removes every call, write attempt and finding whose Time is
// before t, except those of the tenants in keep, and returns how many
// (distinct) rows went. With no tenant kept, whole day partitions are
// dropped; the rest is deleted by a mutation, waited for.
func (s *Store) DeleteBefore(ctx context.Context, t time.Time, keep ...string) (int64, error) {
	cond := timeBefore(t)
	if len(keep) > 0 {
		cond += " AND tenant NOT IN " + quoteList(keep)
	}
	return s.deleteRows(ctx, t, cond, len(keep) == 0, func(tenant string) time.Time {
		if slices.Contains(keep, tenant) {
			return time.Time{}
		}
		return t
	})
}

// DeleteTenantBefore removes the calls, write attempts and findings of one
// tenant whose Time is before t, by a mutation, waited for.
func (s *Store) DeleteTenantBefore(ctx context.Context, tenant string, t time.Time) (int64, error) {
	return s.deleteRows(ctx, t, timeBefore(t)+" AND tenant = "+quote(tenant), false, func(x string) time.Time {
		if x == tenant {
			return t
		}
		return time.Time{}
	})
}

// deleteRows deletes the rows matching cond, after cutting the chains of
// the tenants it removes rows of at their cutoffs (chain.go).
func (s *Store) deleteRows(ctx context.Context, t time.Time, cond string, dropParts bool, cutoff func(tenant string) time.Time) (int64, error) {
	conn, err := s.settledReader(ctx)
	if err != nil {
		return 0, err
	}
	if err := s.waitDrained(ctx); err != nil {
		return 0, err
	}
	s.chainMu.Lock()
	err = s.cutChains(ctx, cutoff)
	s.chainMu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("cannot cut the tamper-evidence chains: %w", err)
	}
	var total int64
	for _, table := range retainedTables {
		var n uint64
		q := "SELECT count() FROM " + s.layout.table(table) + " FINAL WHERE " + cond
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			return total, queryErr(ctx, "count rows to delete", err)
		}
		if n == 0 {
			continue
		}
		if dropParts {
			if err := s.dropPartitionsBefore(ctx, table, t); err != nil {
				return total, queryErr(ctx, "delete", err)
			}
		}
		if err := s.deleteWhere(ctx, table, cond); err != nil {
			return total, queryErr(ctx, "delete", err)
		}
		if !uncounted[table] {
			// The references to calls too late go with their calls,
			// and finding changes by their time, uncounted: they are
			// no calls, writes or findings.
			total += int64(n)
		}
	}
	return total, nil
}

// unstored returns a batch holding the rows of table t of b that ClickHouse
// does not have yet. It is the retry path of servers without deduplication
// tokens: the rows of an insert whose acknowledgement was lost are found
// and not sent again.
func (s *Store) unstored(b *batch, t int) (*batch, error) {
	out := &batch{}
	var err error
	switch t {
	case tCalls:
		out.Calls, err = keepUnstored(s, t, b.Calls, "id", "concat(tenant, '/', id)",
			func(r *callRow) (string, string, int64) { return r.ID, r.Tenant + "/" + r.ID, r.Time })
	case tWrites:
		out.Writes, err = keepUnstored(s, t, b.Writes, "call_id", "concat(tenant, '/', call_id, '/', toString(seq), '/', toString(version))",
			func(r *writeRow) (string, string, int64) {
				return r.CallID, fmt.Sprintf("%s/%s/%d/%d", r.Tenant, r.CallID, r.Seq, r.Version), r.Time
			})
	case tFindings:
		out.Findings, err = keepUnstored(s, t, b.Findings, "id", "id",
			func(r *findingRow) (string, string, int64) { return r.ID, r.ID, r.Time })
	case tTooLate:
		out.TooLate, err = keepUnstored(s, t, b.TooLate, "call_id", "concat(tenant, '/', call_id)",
			func(r *tooLateRow) (string, string, int64) { return r.CallID, r.Tenant + "/" + r.CallID, r.Time })
	case tWatermarks:
		out.Watermarks, err = keepUnstored(s, t, b.Watermarks, "replica", "concat(replica, '/', toString(version))",
			func(r *watermarkRow) (string, string, int64) {
				return r.Replica, fmt.Sprintf("%s/%d", r.Replica, r.Version), r.Time
			})
	}
	return out, err
}

// keepUnstored returns the rows of table t that ClickHouse does not have.
// ident gives a row's value of idCol (looked up), its identity as keyExpr
// renders it, and its time (which bounds the search).
//
// Each lookup query has InsertTimeout of its own, as an insert attempt
// has: a batch of n rows takes n/inChunk of them. One budget for them all
// (flk23) gave each query of a 50,000-row batch a 50th of it: at load 40,
// after ClickHouse was killed and started again, the lookup ran out every
// time, the retry never got to its insert, and the spool never drained
// (TestExactlyOnce_ServerKilled: "store not ready after 2m0s ... cannot
// find stored rows: context deadline exceeded").
func keepUnstored[R any](s *Store, t int, rows []R, idCol, keyExpr string, ident func(*R) (id, key string, time int64)) ([]R, error) {
	ids := make([]string, len(rows))
	var lo, hi int64 = 1<<63 - 1, 0
	for i := range rows {
		id, _, t := ident(&rows[i])
		ids[i], lo, hi = id, min(lo, t), max(hi, t)
	}
	stored := map[string]bool{}
	for i := 0; i < len(ids); i += inChunk {
		q := fmt.Sprintf("SELECT %s FROM %s WHERE time >= toDateTime(%d) AND time <= toDateTime(%d) AND %s IN %s",
			keyExpr, s.layout.table(tableNames[t]), lo, hi, idCol, quoteList(ids[i:min(i+inChunk, len(ids))]))
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.InsertTimeout)
		err := each(ctx, s.conn, "find stored rows", q, func(r driver.Rows) error {
			var k string
			if err := r.Scan(&k); err != nil {
				return classify(fmt.Errorf("cannot read stored rows: %w", err))
			}
			stored[k] = true
			return nil
		})
		cancel()
		if err != nil {
			return nil, classify(err)
		}
	}
	if len(stored) == 0 {
		// The common case, a batch no earlier attempt stored: its rows as
		// they are, read only by the insert, rather than a copy of a drain's
		// merge (tens of MB) and a key made per row.
		return rows, nil
	}
	keep := make([]R, 0, len(rows)-min(len(rows), len(stored)))
	for i := range rows {
		if _, key, _ := ident(&rows[i]); !stored[key] {
			keep = append(keep, rows[i])
		}
	}
	s.skippedOnRetry.Add(int64(len(rows) - len(keep)))
	return keep, nil
}
