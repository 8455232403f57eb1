package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
	"github.com/mcpaudit/mcpaudit/exporter/store"
)

// The investigation side of the store (audit.Investigator). Lifecycle
// changes are inserted directly, not through the batch writer and its
// spool: a person waits for the answer, and while ClickHouse is down it is
// an error they can retry.

// changeKey orders the changes of one finding: the latest wins.
const changeKey = "toUInt64(time) * 1000000000 + time_nanos"

// latestStates is a subquery of each changed finding's current state.
func (s *Store) latestStates(extra string) string {
	return fmt.Sprintf("SELECT finding_id, argMax(state, %s) AS st FROM %s FINAL%s GROUP BY finding_id",
		changeKey, s.layout.table("finding_changes"), extra)
}

// stateCond is the condition on findings.id that keeps state st.
func (s *Store) stateCond(st audit.FindingState) string {
	if st == audit.FindingOpen {
		return "id NOT IN (SELECT finding_id FROM (" + s.latestStates("") + ") WHERE st != 'open')"
	}
	return "id IN (SELECT finding_id FROM (" + s.latestStates("") + ") WHERE st = " + quote(string(st)) + ")"
}

// findingConds builds the conditions of q shared by Findings and
// FindingCounts.
func (s *Store) findingConds(q audit.FindingQuery) conds {
	var c conds
	c.eq("id", q.ID)
	c.eq("kind", string(q.Kind))
	if q.Severity != "" {
		c = append(c, "severity IN "+quoteList(severitiesFrom(q.Severity)))
	}
	c.eq("server", q.Server)
	c.eq("tenant", q.Tenant)
	c.eq("document", q.Document)
	c.eq("key", q.Key)
	c.eq("session", q.Session)
	c.span(q.Since, q.Until)
	switch {
	case q.State != "":
		c = append(c, s.stateCond(q.State))
	case q.ID == "":
		c = append(c, "id NOT IN (SELECT finding_id FROM ("+s.latestStates("")+") WHERE st = "+quote(string(audit.FindingWithdrawn))+")")
	}
	return c
}

// statuses returns the current status of the findings among ids that
// somebody changed.
func (s *Store) statuses(ctx context.Context, conn driver.Conn, ids []string) (map[string]*audit.FindingStatus, error) {
	out := map[string]*audit.FindingStatus{}
	for i := 0; i < len(ids); i += inChunk {
		q := fmt.Sprintf("SELECT finding_id, argMax(state, %s), argMax(by, %s), argMax(note, %s), max(%s) FROM %s FINAL WHERE finding_id IN %s GROUP BY finding_id",
			changeKey, changeKey, changeKey, changeKey, s.layout.table("finding_changes"), quoteList(ids[i:min(i+inChunk, len(ids))]))
		err := each(ctx, conn, "query finding states", q, func(rows driver.Rows) error {
			var id, state, by, note string
			var key uint64
			if err := rows.Scan(&id, &state, &by, &note, &key); err != nil {
				return queryErr(ctx, "read finding states", err)
			}
			out[id] = &audit.FindingStatus{State: audit.FindingState(state), By: by, Note: note,
				At: joinTime(int64(key/1e9), uint32(key%1e9))}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// before is the condition "(time, time_nanos, idCol) < c", for pages
// newest first.
func (c cursor) before(idCol string) string {
	return fmt.Sprintf("time <= toDateTime(%d) AND (time < toDateTime(%d) OR time_nanos < %d OR (time_nanos = %d AND %s < %s))",
		c.Time, c.Time, c.Nanos, c.Nanos, idCol, quote(c.ID))
}

// findingsNewest is Findings for q.Newest: the same query, backwards.
func (s *Store) findingsNewest(ctx context.Context, conn driver.Conn, q audit.FindingQuery) (audit.FindingPage, error) {
	page := audit.FindingPage{Findings: []audit.Finding{}}
	c := s.findingConds(q)
	if q.Cursor != "" {
		cur, err := parseCursor(q.Cursor)
		if err != nil || !cur.Newest {
			return page, fmt.Errorf("cannot read cursor %q: %w", q.Cursor, audit.ErrBadCursor)
		}
		c = append(c, cur.before("id"))
	}
	limit := store.PageLimit(q.Limit)
	query := fmt.Sprintf("SELECT %s FROM %s FINAL%s ORDER BY time DESC, time_nanos DESC, id DESC LIMIT %d",
		findingSelect, s.layout.table("findings"), c.where(), limit+1)
	var last findingRow
	err := each(ctx, conn, "query findings", query, func(rows driver.Rows) error {
		r, err := scanFinding(rows)
		if err != nil {
			return queryErr(ctx, "read findings", err)
		}
		if len(page.Findings) == limit {
			page.NextCursor = cursor{Time: last.Time, Nanos: last.TimeNanos, ID: last.ID, Newest: true}.String()
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

// addStatuses sets the Status of the findings somebody changed.
func (s *Store) addStatuses(ctx context.Context, conn driver.Conn, fs []audit.Finding) error {
	if len(fs) == 0 {
		return nil
	}
	ids := make([]string, len(fs))
	for i := range fs {
		ids[i] = fs[i].ID()
	}
	st, err := s.statuses(ctx, conn, ids)
	if err != nil {
		return err
	}
	for i := range fs {
		fs[i].Status = st[ids[i]]
	}
	return nil
}

// FindingCounts counts the selected findings by kind and lifecycle state.
func (s *Store) FindingCounts(ctx context.Context, q audit.FindingQuery) ([]audit.FindingCount, error) {
	conn, err := s.settledReader(ctx)
	if err != nil {
		return nil, err
	}
	withdrawn := q.State == audit.FindingWithdrawn
	q.State = ""
	if withdrawn {
		q.State = audit.FindingWithdrawn
	}
	base := s.findingConds(q)
	count := func(extra string) (map[audit.Kind]int64, error) {
		c := base
		if extra != "" {
			c = append(append(conds{}, base...), extra)
		}
		out := map[audit.Kind]int64{}
		query := fmt.Sprintf("SELECT kind, count() FROM (SELECT kind FROM %s FINAL%s) GROUP BY kind", s.layout.table("findings"), c.where())
		err := each(ctx, conn, "count findings", query, func(rows driver.Rows) error {
			var k string
			var n uint64
			if err := rows.Scan(&k, &n); err != nil {
				return queryErr(ctx, "count findings", err)
			}
			out[audit.Kind(k)] = int64(n)
			return nil
		})
		return out, err
	}
	all, err := count("")
	if err != nil {
		return nil, err
	}
	byState := map[audit.FindingState]map[audit.Kind]int64{}
	for _, st := range []audit.FindingState{audit.FindingAcknowledged, audit.FindingResolved, audit.FindingWithdrawn} {
		if byState[st], err = count(s.stateCond(st)); err != nil {
			return nil, err
		}
	}
	out := []audit.FindingCount{}
	for _, k := range audit.Kinds {
		open := all[k]
		for _, st := range audit.FindingStates {
			n := byState[st][k]
			if st == audit.FindingOpen {
				n = open - byState[audit.FindingAcknowledged][k] - byState[audit.FindingResolved][k] - byState[audit.FindingWithdrawn][k]
			}
			if n > 0 {
				out = append(out, audit.FindingCount{Kind: k, State: st, Count: n})
			}
		}
	}
	audit.SortFindingCounts(out)
	return out, nil
}

// ChangeFinding records a state change of a finding; see
// audit.Investigator. Two people changing one finding at the same moment
// are both recorded; the later change is its state.
func (s *Store) ChangeFinding(ctx context.Context, c audit.FindingChange) (audit.FindingStatus, error) {
	conn, err := s.settledReader(ctx)
	if err != nil {
		return audit.FindingStatus{}, err
	}
	sec, ns, err := splitTime(c.Time)
	if err != nil || c.Time.IsZero() {
		return audit.FindingStatus{}, fmt.Errorf("cannot change finding state: bad time %s", c.Time)
	}
	var fc conds
	fc.eq("id", c.FindingID)
	fc.eq("tenant", c.Tenant)
	var tenant string
	found := false
	err = each(ctx, conn, "find the finding", "SELECT tenant FROM "+s.layout.table("findings")+fc.where()+" LIMIT 1", func(rows driver.Rows) error {
		found = true
		return queryErr(ctx, "find the finding", rows.Scan(&tenant))
	})
	if err != nil {
		return audit.FindingStatus{}, err
	}
	if !found {
		return audit.FindingStatus{}, fmt.Errorf("cannot change finding state: finding %s: %w", c.FindingID, audit.ErrNotFound)
	}
	cur, err := s.statuses(ctx, conn, []string{c.FindingID})
	if err != nil {
		return audit.FindingStatus{}, err
	}
	from := audit.FindingOpen
	if st := cur[c.FindingID]; st != nil {
		from = st.State
	}
	if err := audit.CheckTransition(from, c.State); err != nil {
		return audit.FindingStatus{}, fmt.Errorf("cannot change finding state: finding %s: %w", c.FindingID, err)
	}
	row := changeRow{Tenant: tenant, FindingID: c.FindingID, Time: sec, TimeNanos: ns, State: string(c.State), By: c.By, Note: c.Note}
	if err := s.storeChange(ctx, conn, &row); err != nil {
		return audit.FindingStatus{}, err
	}
	return audit.FindingStatus{State: c.State, By: c.By, At: joinTime(sec, ns), Note: c.Note}, nil
}

// FindingHistory returns every state change of a finding, oldest first.
func (s *Store) FindingHistory(ctx context.Context, id, tenant string) ([]audit.FindingChange, error) {
	conn, err := s.settledReader(ctx)
	if err != nil {
		return nil, err
	}
	var c conds
	c.eq("finding_id", id)
	c.eq("tenant", tenant)
	out := []audit.FindingChange{}
	q := "SELECT tenant, state, by, note, time, time_nanos FROM " + s.layout.table("finding_changes") + " FINAL" + c.where() + " ORDER BY time, time_nanos"
	err = each(ctx, conn, "query finding history", q, func(rows driver.Rows) error {
		ch := audit.FindingChange{FindingID: id}
		var t time.Time
		var ns uint32
		var state string
		if err := rows.Scan(&ch.Tenant, &state, &ch.By, &ch.Note, &t, &ns); err != nil {
			return queryErr(ctx, "read finding history", err)
		}
		ch.State = audit.FindingState(state)
		ch.Time = joinTime(t.Unix(), ns)
		out = append(out, ch)
		return nil
	})
	return out, err
}

// Calls returns one page of stored calls in (time, id) order; see
// audit.Investigator.
func (s *Store) Calls(ctx context.Context, q audit.CallQuery) (audit.CallPage, error) {
	page := audit.CallPage{Calls: []audit.Record{}}
	conn, err := s.reader()
	if err != nil {
		return page, err
	}
	// Only the first page waits for the spool: the calls acknowledged
	// before the read began. A later page's cursor holds its position,
	// and the calls acknowledged since may fall either side of it; a wait
	// per page would force an insert per page under ingest.
	if q.Cursor == "" {
		if err := s.settle(ctx); err != nil {
			return page, err
		}
	}
	var c conds
	c.eq("tenant", q.Tenant)
	c.eq("server", q.Server)
	c.eq("session", q.Session)
	c.eq("source", q.Source)
	if q.Document != "" {
		c = append(c, "has(arrayPushFront(other_documents, document), "+quote(q.Document)+")")
	}
	c.span(q.Since, q.Until)
	limit := store.PageLimit(q.Limit)
	if len(q.IDs) > 0 {
		limit = len(q.IDs)
		var ors []string
		for i := 0; i < len(q.IDs); i += inChunk {
			ors = append(ors, "id IN "+quoteList(q.IDs[i:min(i+inChunk, len(q.IDs))]))
		}
		c = append(c, "("+strings.Join(ors, " OR ")+")")
	}
	if q.Cursor != "" {
		cur, err := parseCursor(q.Cursor)
		if err != nil {
			return page, err
		}
		c = append(c, cur.after("id", false))
	}
	query := fmt.Sprintf("SELECT %s FROM %s FINAL%s ORDER BY time, time_nanos, id LIMIT %d",
		callSelect, s.layout.table("calls"), c.where(), limit+1)
	var last callRow
	err = each(ctx, conn, "query calls", query, func(rows driver.Rows) error {
		r, err := scanCall(rows)
		if err != nil {
			return queryErr(ctx, "read calls", err)
		}
		if len(page.Calls) == limit {
			page.NextCursor = cursor{Time: last.Time, Nanos: last.TimeNanos, ID: last.ID}.String()
			return nil
		}
		page.Calls = append(page.Calls, *r.record())
		last = r
		return nil
	})
	return page, err
}

// FailureCounts counts the failed calls in a time range by retry action.
func (s *Store) FailureCounts(ctx context.Context, q audit.CountQuery) (map[audit.RetryAction]int64, error) {
	conn, err := s.settledReader(ctx)
	if err != nil {
		return nil, err
	}
	var c conds
	c.eq("tenant", q.Tenant)
	c.eq("server", q.Server)
	c.span(q.Since, q.Until)
	c = append(c, fmt.Sprintf("bitAnd(flags, %d) != 0", flagFailure))
	out := map[audit.RetryAction]int64{}
	query := fmt.Sprintf("SELECT failure_action, count() FROM (SELECT failure_action FROM %s FINAL%s) GROUP BY failure_action",
		s.layout.table("calls"), c.where())
	err = each(ctx, conn, "count failures", query, func(rows driver.Rows) error {
		var a string
		var n uint64
		if err := rows.Scan(&a, &n); err != nil {
			return queryErr(ctx, "count failures", err)
		}
		out[audit.RetryAction(a)] = int64(n)
		return nil
	})
	return out, err
}

// storeChange inserts a finding state change and the chain entry that
// covers it, in that order, under chainMu.
func (s *Store) storeChange(ctx context.Context, conn driver.Conn, row *changeRow) error {
	s.chainMu.Lock()
	defer s.chainMu.Unlock()
	bc := &batchChain{heads: map[string]head{}}
	var p pending
	p.add(row.Tenant, changeSum(row), row.Time, &row.Chain)
	s.chainEntries(bc, chain.KindChanges, &p, time.Now())
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+s.layout.table("finding_changes")+" (tenant, finding_id, time, time_nanos, state, by, note, version, chain_entry)")
	if err != nil {
		return queryErr(ctx, "insert a finding change", err)
	}
	if err := b.Append(row.Tenant, row.FindingID, time.Unix(row.Time, 0), row.TimeNanos, row.State, row.By, row.Note, uint64(time.Now().UnixNano()), row.Chain); err != nil {
		b.Abort()
		return queryErr(ctx, "insert a finding change", err)
	}
	if err := b.Send(); err != nil {
		return queryErr(ctx, "insert a finding change", err)
	}
	cb, err := conn.PrepareBatch(ctx, "INSERT INTO "+s.layout.DB+".chain ("+strings.Join(chainColumns, ", ")+")")
	if err != nil {
		return queryErr(ctx, "chain a finding change", err)
	}
	for i, c := range chainColumnValues(bc.rows) {
		if err := cb.Column(i).Append(c); err != nil {
			cb.Abort()
			return fmt.Errorf("cannot chain a finding change: %w", err)
		}
	}
	if err := cb.Send(); err != nil {
		return queryErr(ctx, "chain a finding change", err)
	}
	for t, h := range bc.heads {
		s.heads[t] = h
	}
	return nil
}
