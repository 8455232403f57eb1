package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/mcpaudit/mcpaudit/audit"
)

// The counts behind the report (report.Build): the bad writes of a window
// by cause, server, tool, document and client, and the writes of each day,
// each grouped by the server, so that a report reads rows in the number of
// names and days rather than of writes.

// WriteCountsByRange counts the write attempts of each range [bounds[i],
// bounds[i+1]) by current state in one query, grouped by range and state.
func (s *Store) WriteCountsByRange(ctx context.Context, q audit.CountQuery, bounds []time.Time) ([]map[audit.WriteState]int64, error) {
	const op = "count writes"
	if len(bounds) < 2 {
		return []map[audit.WriteState]int64{}, nil
	}
	conn, err := s.settledReader(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]map[audit.WriteState]int64, len(bounds)-1)
	for i := range out {
		out[i] = map[audit.WriteState]int64{}
	}
	var c conds
	c.eq("server", q.Server)
	c.eq("tenant", q.Tenant)
	c.span(bounds[0], bounds[len(bounds)-1])
	// The range of a write is the number of inner bounds at or before its
	// time, in nanoseconds as clampTime bounds the span: a sum of
	// comparisons, as servers without lambdas over a subquery's columns
	// (18.16) take it.
	terms := []string{"0"}
	for _, b := range bounds[1 : len(bounds)-1] {
		sec, ns := clampTime(b)
		terms = append(terms, fmt.Sprintf("(t >= %d)", uint64(sec)*1e9+uint64(ns)))
	}
	rangeOf := "toUInt64(" + strings.Join(terms, " + ") + ")"
	query := fmt.Sprintf("SELECT %s AS i, state, count() FROM (SELECT state, toUInt64(toUInt32(time)) * 1000000000 + time_nanos AS t FROM %s FINAL%s) GROUP BY i, state",
		rangeOf, s.layout.table("writes"), c.where())
	s.commitMu.RLock()
	defer s.commitMu.RUnlock()
	err = each(ctx, conn, op, query, func(rows driver.Rows) error {
		var i, n uint64
		var state string
		if err := rows.Scan(&i, &state, &n); err != nil {
			return queryErr(ctx, op, err)
		}
		if i >= uint64(len(out)) {
			return fmt.Errorf("cannot %s: range %d of %d", op, i, len(out))
		}
		out[i][audit.WriteState(state)] += int64(n)
		return nil
	})
	return out, err
}

// BadWriteCounts counts the bad writes of a window with one GROUP BY per
// dimension; the client comes from a join of the bad writes with their
// calls.
func (s *Store) BadWriteCounts(ctx context.Context, q audit.BadWriteQuery) (audit.BadWriteCounts, error) {
	const op = "count bad writes"
	var out audit.BadWriteCounts
	conn, err := s.settledReader(ctx)
	if err != nil {
		return out, err
	}
	// The identity columns filter inside FINAL; the state, which changes,
	// only after FINAL picked the latest version (as Writes).
	var c conds
	c.eq("server", q.Server)
	c.eq("tenant", q.Tenant)
	c.span(q.Since, q.Until)
	const cols = "tenant, server, document, call_id, tool, state, reason"
	bad := fmt.Sprintf("(SELECT %s FROM (SELECT %s FROM %s FINAL%s) WHERE state IN %s)", cols, cols,
		s.layout.table("writes"), c.where(), quoteList([]string{string(audit.StateDoubleApplied), string(audit.StateUnverified)}))
	limit := ""
	if q.Top > 0 {
		limit = fmt.Sprintf(" LIMIT %d", q.Top)
	}
	// Strings order by their bytes, as the report sorts names.
	byName := func(from, column, where string) string {
		return fmt.Sprintf("SELECT %s AS name, count() AS n FROM %s%s GROUP BY name ORDER BY n DESC, name%s", column, from, where, limit)
	}
	names := func(query string) ([]audit.NameCount, error) {
		out := []audit.NameCount{}
		err := each(ctx, conn, op, query, func(rows driver.Rows) error {
			var name string
			var n uint64
			if err := rows.Scan(&name, &n); err != nil {
				return queryErr(ctx, op, err)
			}
			out = append(out, audit.NameCount{Name: name, Count: int64(n)})
			return nil
		})
		return out, err
	}
	s.commitMu.RLock()
	defer s.commitMu.RUnlock()
	err = each(ctx, conn, op, "SELECT state, reason, count() FROM "+bad+" GROUP BY state, reason", func(rows driver.Rows) error {
		var state, reason string
		var n uint64
		if err := rows.Scan(&state, &reason, &n); err != nil {
			return queryErr(ctx, op, err)
		}
		out.Causes = append(out.Causes, audit.CauseCount{State: audit.WriteState(state), Reason: audit.Reason(reason), Count: int64(n)})
		return nil
	})
	if err != nil {
		return out, err
	}
	if out.Servers, err = names(byName(bad, "server", "")); err != nil {
		return out, err
	}
	if out.Tools, err = names(byName(bad, "tool", "")); err != nil {
		return out, err
	}
	// A document is its server's: two servers' documents of one path
	// count apart.
	out.Documents = []audit.NameCount{}
	err = each(ctx, conn, op, fmt.Sprintf("SELECT document AS name, server, count() AS n FROM %s WHERE document != '' GROUP BY name, server ORDER BY n DESC, name, server%s", bad, limit),
		func(rows driver.Rows) error {
			var c audit.NameCount
			var n uint64
			if err := rows.Scan(&c.Name, &c.Server, &n); err != nil {
				return queryErr(ctx, op, err)
			}
			c.Count = int64(n)
			out.Documents = append(out.Documents, c)
			return nil
		})
	if err != nil {
		return out, err
	}
	out.Clients = []audit.NameCount{}
	if q.Clients {
		// Each bad write with the client of its call of the same tenant;
		// a write without one gets the empty client of an unmatched ANY
		// LEFT JOIN. In a cluster a write and its call are on one shard
		// (both sharded by the call id), but the subqueries read the
		// Distributed tables, which only GLOBAL allows.
		global := ""
		if s.layout.Cluster != "" {
			global = "GLOBAL "
		}
		var cc conds
		cc.eq("tenant", q.Tenant)
		cc = append(cc, fmt.Sprintf("id %sIN (SELECT call_id FROM %s)", global, bad))
		joined := fmt.Sprintf("(SELECT tenant, call_id AS id FROM %s) %sANY LEFT JOIN (SELECT tenant, id, client FROM %s FINAL%s) USING (tenant, id)",
			bad, global, s.layout.table("calls"), cc.where())
		if out.Clients, err = names(byName(joined, "if(client = '', "+quote(audit.UnknownClient)+", client)", "")); err != nil {
			return out, err
		}
	}
	return out, nil
}
