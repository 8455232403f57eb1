package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// The counts behind the report (report.Build): the bad writes of a window
// by cause, server, tool, document and client, and the writes of each day.

// WriteCountsByRange counts the write attempts of each range [bounds[i],
// bounds[i+1]) by current state, as WriteCounts counts one range, in one
// read transaction: the whole hours of every range from one read of the
// write_hours rollup, grouped by hour, and only the hours cut by a bound
// from the writes themselves.
func (s *Store) WriteCountsByRange(ctx context.Context, q audit.CountQuery, bounds []time.Time) ([]map[audit.WriteState]int64, error) {
	const op = "count writes"
	if s.closed.Load() {
		return nil, errClosed(op)
	}
	if len(bounds) < 2 {
		return []map[audit.WriteState]int64{}, nil
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer tx.Rollback()
	out := make([]map[audit.WriteState]int64, len(bounds)-1)
	type hours struct {
		lo, hi int64
		whole  bool
	}
	hs := make([]hours, len(out))
	for i := range out {
		out[i] = map[audit.WriteState]int64{}
		hs[i].lo, hs[i].hi, hs[i].whole = wholeHours(bounds[i], bounds[i+1])
	}
	add := func(counts map[audit.WriteState]int64, query string, args []any) error {
		return addStateCounts(ctx, tx, counts, query, args)
	}
	scan := func(counts map[audit.WriteState]int64, since, until time.Time) error {
		if !since.Before(until) {
			return nil
		}
		var f filter
		f.internedEq("server", q.Server)
		f.internedEq("tenant", q.Tenant)
		f.span("time", since, until)
		return add(counts, `SELECT `+str("state")+`, count(*) FROM writes`+f.where()+` GROUP BY state`, f.args)
	}
	// The rollup is read over the whole hours of the ranges that have
	// some (those of the whole span would skip it for a span that starts
	// before 1970, whose later ranges still leave their whole hours to it).
	lo, hi, whole := int64(0), int64(0), false
	for _, h := range hs {
		if h.whole {
			if !whole || h.lo < lo {
				lo = h.lo
			}
			if !whole || h.hi > hi {
				hi = h.hi
			}
			whole = true
		}
	}
	if whole {
		var f filter
		f.internedEq("server", q.Server)
		f.internedEq("tenant", q.Tenant)
		f.add("hour >= ?", lo)
		f.add("hour < ?", hi)
		rows, err := tx.QueryContext(ctx, `SELECT hour, `+str("state")+`, sum(n) FROM write_hours`+f.where()+` GROUP BY hour, state`, f.args...)
		if err != nil {
			return nil, s.fail(op, err)
		}
		for rows.Next() {
			var hour, n int64
			var state string
			if err := rows.Scan(&hour, &state, &n); err != nil {
				rows.Close()
				return nil, s.fail(op, err)
			}
			// The range whose whole hours hold hour, if any: an hour cut
			// by a bound is counted from the writes below.
			i := sort.Search(len(hs), func(i int) bool { return hs[i].hi > hour })
			if i < len(hs) && hs[i].whole && hs[i].lo <= hour && n != 0 {
				out[i][audit.WriteState(state)] += n
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, s.fail(op, err)
		}
	}
	for i, h := range hs {
		since, until := bounds[i], bounds[i+1]
		if !h.whole {
			err = scan(out[i], since, until)
		} else if err = scan(out[i], since, time.Unix(0, h.lo*hourNanos)); err == nil {
			err = scan(out[i], time.Unix(0, h.hi*hourNanos), until)
		}
		if err != nil {
			return nil, s.fail(op, err)
		}
	}
	return out, nil
}

// BadWriteCounts counts the bad writes of a window along each dimension
// with a GROUP BY over the partial indexes of the two bad states, which
// hold every column it counts by (createRollup): no row of the table is
// read, and none leaves SQLite, for a cause, server, tool or document. The
// client is not a column: it is read from the head of each bad write's
// call record (stored at the write's time, found through the time index;
// through the id index when it is not there).
func (s *Store) BadWriteCounts(ctx context.Context, q audit.BadWriteQuery) (audit.BadWriteCounts, error) {
	const op = "count bad writes"
	var out audit.BadWriteCounts
	if s.closed.Load() {
		return out, errClosed(op)
	}
	if q.Clients {
		// The calls acknowledged from the call log, as Calls reads them.
		if err := s.caughtUp(ctx, op); err != nil {
			return out, err
		}
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return out, s.fail(op, err)
	}
	defer tx.Rollback()
	// bad selects the bad writes, each state through its partial index
	// (a literal state is what lets SQLite use it).
	var arms []string
	var args []any
	for _, st := range []audit.WriteState{audit.StateDoubleApplied, audit.StateUnverified} {
		var f filter
		f.add(fmt.Sprintf("state = %d", s.inv.bad[st]))
		f.internedEq("server", q.Server)
		f.internedEq("tenant", q.Tenant)
		f.span("time", q.Since, q.Until)
		arms = append(arms, `SELECT time, call_id, state, server, tenant, tool, reason, document FROM writes`+f.where())
		args = append(args, f.args...)
	}
	bad := `(` + strings.Join(arms, ` UNION ALL `) + `)`
	limit := int64(q.Top)
	if limit <= 0 {
		limit = -1 // every row
	}
	names := func(query string) ([]audit.NameCount, error) {
		rows, err := tx.QueryContext(ctx, query, append(slices.Clone(args), limit)...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := []audit.NameCount{}
		for rows.Next() {
			var c audit.NameCount
			if err := rows.Scan(&c.Name, &c.Count); err != nil {
				return nil, err
			}
			out = append(out, c)
		}
		return out, rows.Err()
	}
	// Names compare in byte order (SQLite's BINARY collation), as the
	// report sorts them.
	byName := func(column, where string) string {
		return `SELECT ` + column + ` AS name, count(*) AS n FROM ` + bad + where + ` GROUP BY name ORDER BY n DESC, name LIMIT ?`
	}
	if out.Servers, err = names(byName(str("server"), "")); err == nil {
		if out.Tools, err = names(byName(str("tool"), "")); err == nil {
			out.Documents, err = s.badDocuments(ctx, tx, bad, args, limit)
		}
	}
	if err != nil {
		return out, s.fail(op, err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT `+str("state")+`, `+str("reason")+`, count(*) FROM `+bad+` GROUP BY state, reason`, args...)
	if err != nil {
		return out, s.fail(op, err)
	}
	for rows.Next() {
		var c audit.CauseCount
		var state, reason string
		if err := rows.Scan(&state, &reason, &c.Count); err != nil {
			rows.Close()
			return out, s.fail(op, err)
		}
		c.State, c.Reason = audit.WriteState(state), audit.Reason(reason)
		out.Causes = append(out.Causes, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, s.fail(op, err)
	}
	out.Clients = []audit.NameCount{}
	if q.Clients {
		by, lost, err := s.badWriteClients(ctx, tx, bad, args)
		if err != nil {
			return out, s.fail(op, err)
		}
		// The transaction's connection goes back to the pool before the
		// writes whose call is elsewhere are looked up by id, which takes
		// a reading connection of its own: holding one while waiting for
		// another hung with read_conns 1, and read_conns reports at once
		// hung each other and every other read.
		tx.Rollback()
		if err := s.lostClients(ctx, by, lost); err != nil {
			return out, s.fail(op, err)
		}
		out.Clients = topNames(by, q.Top)
	}
	return out, nil
}

// badDocuments counts the writes bad selects by document and server (a
// document is its server's: two servers' documents of one path count
// apart), the most first, ties in byte order of the document, then of the
// server; at most limit rows (-1: every one).
func (s *Store) badDocuments(ctx context.Context, tx *sql.Tx, bad string, args []any, limit int64) ([]audit.NameCount, error) {
	rows, err := tx.QueryContext(ctx, `SELECT document AS name, `+str("server")+` AS srv, count(*) AS n FROM `+bad+
		` WHERE document != '' GROUP BY document, server ORDER BY n DESC, name, srv LIMIT ?`, append(slices.Clone(args), limit)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []audit.NameCount{}
	for rows.Next() {
		var c audit.NameCount
		if err := rows.Scan(&c.Name, &c.Server, &c.Count); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// missingCall is a bad write's call not stored at the write's time.
type missingCall struct{ id, tenant string }

// loggedCall is a bad write's call with the write's time (its call's), to
// look it up in the call log (Calls "log").
type loggedCall struct {
	missingCall
	at int64
}

// badWriteClients counts the writes bad selects by the client of their
// call stored at the write's time, and returns those whose call is not
// there, to be looked up by id (lostClients) once tx is done with.
func (s *Store) badWriteClients(ctx context.Context, tx *sql.Tx, bad string, args []any) (map[string]int64, []missingCall, error) {
	by := map[string]int64{}
	if s.opts.Calls == CallsLog {
		// Every call is looked up in the call log by id at the write's
		// time, its call's (loggedClients): the log takes no SQLite
		// connection, so tx may be held meanwhile. The rows are read
		// first, the lookups after.
		rows, err := tx.QueryContext(ctx, `SELECT w.call_id, `+str("w.tenant")+`, w.time FROM `+bad+` w`, args...)
		if err != nil {
			return nil, nil, err
		}
		var logged []loggedCall
		for rows.Next() {
			var id any
			var tenant string
			var at int64
			if err := rows.Scan(&id, &tenant, &at); err != nil {
				rows.Close()
				return nil, nil, err
			}
			logged = append(logged, loggedCall{missingCall{unpackID(callPrefix, id), tenant}, at})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, err
		}
		lost, err := s.loggedClients(ctx, by, logged)
		return by, lost, err
	}
	// The call of a write is stored at the write's time: one step of the
	// time index. A write whose call is elsewhere (or nowhere) is looked
	// up by id below.
	rows, err := tx.QueryContext(ctx, `SELECT w.call_id, `+str("w.tenant")+`,
		(SELECT c.rec FROM calls c WHERE c.time = w.time AND c.id = w.call_id AND c.tenant = w.tenant LIMIT 1)
		FROM `+bad+` w`, args...)
	if err != nil {
		return nil, nil, err
	}
	var lost []missingCall
	var buf []byte
	for rows.Next() {
		var id any
		var tenant string
		var blob sql.RawBytes
		if err := rows.Scan(&id, &tenant, &blob); err != nil {
			rows.Close()
			return nil, nil, err
		}
		if blob == nil {
			lost = append(lost, missingCall{unpackID(callPrefix, id), tenant})
			continue
		}
		raw, err := decompress(buf, blob)
		if err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("call %s: %w", unpackID(callPrefix, id), err)
		}
		if blob[0] != codecRaw {
			buf = raw[:0] // the decompressor's, not the driver's
		}
		client, ok := recordClient(raw)
		if !ok {
			rows.Close()
			return nil, nil, fmt.Errorf("call %s: %w", unpackID(callPrefix, id), errCorrupt)
		}
		by[clientName(string(client))]++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return by, lost, nil
}

// loggedClients counts in by the writes of logged by the client of their
// call looked up in the call log at the write's time (one segment's table,
// not every one's), and returns those whose call is not there, to be
// looked up by id alone (lostClients), as the calls table's time index
// does.
func (s *Store) loggedClients(ctx context.Context, by map[string]int64, logged []loggedCall) ([]missingCall, error) {
	var lost []missingCall
	for _, c := range logged {
		recs, err := s.opts.CallLog.Get(ctx, c.id, fromNanos(c.at))
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(recs, func(r audit.Record) bool { return r.Call.Tenant == c.tenant })
		if i < 0 {
			lost = append(lost, c.missingCall)
			continue
		}
		by[clientName(recs[i].Call.Client)]++
	}
	return lost, nil
}

// lostClients counts in by the writes of lost by the client of their call,
// looked up by id ("(unknown)" when none is stored).
func (s *Store) lostClients(ctx context.Context, by map[string]int64, lost []missingCall) error {
	if len(lost) == 0 {
		return nil
	}
	ids := make([]string, len(lost))
	for i, m := range lost {
		ids[i] = m.id
	}
	recs, err := s.callsByID(ctx, ids)
	if err != nil {
		return err
	}
	clients := make(map[missingCall]string, len(recs))
	for _, r := range recs {
		clients[missingCall{r.Call.ID, r.Call.Tenant}] = r.Call.Client
	}
	for _, m := range lost {
		by[clientName(clients[m])]++
	}
	return nil
}

// topNames returns the top of by, the most counted first, ties in byte
// order of their names; every name when top is not positive.
func topNames(by map[string]int64, top int) []audit.NameCount {
	out := make([]audit.NameCount, 0, len(by))
	for name, n := range by {
		out = append(out, audit.NameCount{Name: name, Count: n})
	}
	slices.SortFunc(out, func(a, b audit.NameCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Name, b.Name))
	})
	if top > 0 && len(out) > top {
		out = out[:top]
	}
	return out
}

// clientName is the name a client is counted under.
func clientName(client string) string {
	if client == "" {
		return audit.UnknownClient
	}
	return client
}
