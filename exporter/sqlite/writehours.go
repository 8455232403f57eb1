package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
)

// The committer keeps write_hours itself (schema 7): per batch, one upsert
// per (hour, tenant, server, state) that its writes moved, where the
// triggers of schema 6 ran a sub-program and an upsert per write row
// (sqc24 in docs/benchmarks.md). For that it must know, of each write it
// upserts, whether it was stored and in which state and server:
//   - a write it stored or changed before in this process is in its cache
//     (known), with its state: it is upserted, and its count moves when
//     its state or server changed, as the update trigger did;
//   - the others are inserted with INSERT OR IGNORE inside a savepoint:
//     when every one was inserted (the common case: new writes), each
//     counts one; otherwise the savepoint is rolled back, and they are
//     upserted after reading the stored rows they replace (their key
//     leads with time, so the pages are those the upsert then changes).
// The cache is the committed truth only while the committer alone writes
// the writes table: it is forgotten when a transaction fails and when
// retention deletes writes. Retention's deletes still go through the
// delete trigger (write_hours_delete): they are row by row anyway.

// sqlWritesBefore reads the stored state and server of the writes of a
// chunk, by their keys.
const sqlWritesBefore = `SELECT time, call_id, seq, tenant, state, server FROM writes
	WHERE (time, call_id, seq, tenant) IN (VALUES (?, ?, ?, ?))`

// Upserts of one write_hours row by the net change of a batch; a negative
// change of a row that is missing changes nothing, as the triggers'
// UPDATE did.
const (
	sqlHoursAdd = `INSERT INTO write_hours (hour, tenant, server, state, n) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (hour, tenant, server, state) DO UPDATE SET n = n + excluded.n`
	sqlHoursSub = `UPDATE write_hours SET n = n + ?5 WHERE hour = ?1 AND tenant = ?2 AND server = ?3 AND state = ?4`
)

// Columns of a write's arguments (sqlUpsertWrite's VALUES order).
const (
	wcCallID = 0
	wcSeq    = 1
	wcTime   = 2
	wcState  = 3
	wcServer = 4
	wcTenant = 5
)

// writeKey is a write's primary key; id is its call id's stored form,
// behind a byte saying whether it is a blob or a text.
type writeKey struct {
	time, seq, tenant int64
	id                string
}

func writeKeyOf(t, seq, tenant int64, id any) (writeKey, error) {
	k := writeKey{time: t, seq: seq, tenant: tenant}
	switch id := id.(type) {
	case []byte:
		k.id = "b" + string(id)
	case string:
		k.id = "t" + id
	default:
		return k, fmt.Errorf("write call id of type %T", id)
	}
	return k, nil
}

// hourKey is a row of write_hours.
type hourKey struct{ hour, tenant, server, state int64 }

// stateOf is what write_hours counts a write by, besides its key.
type stateOf struct{ state, server int64 }

// hourCounts is the committer's count of a batch's changes to write_hours,
// its cache of the writes it stored, and its space to read stored writes
// into, kept for the next batch. Only the committer goroutine uses it.
type hourCounts struct {
	delta map[hourKey]int64
	// known are the state and server of writes stored: those the
	// committer stored or changed, up to maxKnown, until forget.
	known map[writeKey]stateOf
	cur   map[writeKey]stateOf
	keys  []any
	dest  []driver.Value
	// misses and hits are the indexes of a batch's rows (in order) not
	// known and known (or met before in the batch).
	misses, hits []int
	args         []any
}

// maxKnown bounds the committer's cache of stored writes: a write is
// re-judged within the detector's window, a few minutes of writes.
const maxKnown = 1 << 17

// forget empties the cache of stored writes: a transaction failed, or
// writes were deleted.
func (h *hourCounts) forget() { clear(h.known) }

// upsertWrites stores the writes of args (sqlUpsertWrite's columns, one
// row after the other), each as its upsert would, and changes write_hours
// by what they moved.
func (s *Store) upsertWrites(ctx context.Context, conn *sql.Conn, tx *sql.Tx, args []any) error {
	if len(args) == 0 {
		return nil
	}
	h := &s.hours
	if h.delta == nil {
		h.delta, h.known, h.cur = map[hourKey]int64{}, map[writeKey]stateOf{}, map[writeKey]stateOf{}
		h.dest = make([]driver.Value, 6)
	}
	clear(h.delta)
	if len(h.known) >= maxKnown {
		h.forget()
	}
	cols := s.rows.writes.cols
	n := len(args) / cols
	// Rows whose key is known, or met before in args, come after the first
	// of their key, which the misses' insert stores: their upsert is an
	// update.
	h.misses, h.hits = h.misses[:0], h.hits[:0]
	clear(h.cur)
	for i := range n {
		r := args[i*cols : (i+1)*cols]
		k, err := writeKeyOf(r[wcTime].(int64), r[wcSeq].(int64), r[wcTenant].(int64), r[wcCallID])
		if err != nil {
			return err
		}
		if _, ok := h.known[k]; ok {
			h.hits = append(h.hits, i)
		} else if _, ok := h.cur[k]; ok {
			h.hits = append(h.hits, i)
		} else {
			h.misses = append(h.misses, i)
			h.cur[k] = stateOf{}
		}
	}
	if err := s.insertNewWrites(ctx, conn, tx, args); err != nil {
		return err
	}
	if len(h.hits) > 0 {
		h.args = h.args[:0]
		for _, i := range h.hits {
			r := args[i*cols : (i+1)*cols]
			t, tenant := r[wcTime].(int64), r[wcTenant].(int64)
			k, _ := writeKeyOf(t, r[wcSeq].(int64), tenant, r[wcCallID]) // checked above
			h.move(k, t, tenant, h.known[k], true, stateOf{r[wcState].(int64), r[wcServer].(int64)})
			h.args = append(h.args, r...)
		}
		up := s.rows.writes
		err := up.chunks(len(h.hits), func(lo, hi int) error {
			_, err := up.exec(ctx, conn, tx, h.args[lo*cols:hi*cols])
			return err
		})
		clear(h.args) // keeps none of the batch's values
		if err != nil {
			return err
		}
	}
	return h.store(ctx, tx)
}

// move counts a write of key k going from was (stored when ok) to now,
// and keeps now as its stored state.
func (h *hourCounts) move(k writeKey, t, tenant int64, was stateOf, ok bool, now stateOf) {
	count := func(st stateOf, n int64) {
		h.delta[hourKey{t / hourNanos, tenant, st.server, st.state}] += n
	}
	if !ok {
		count(now, 1)
	} else if was != now {
		count(was, -1)
		count(now, 1)
	}
	h.known[k] = now
}

// insertNewWrites stores the writes of args at h.misses, whose keys the
// cache does not know: with INSERT OR IGNORE when none of them is stored,
// else by upserts after reading the rows they replace.
func (s *Store) insertNewWrites(ctx context.Context, conn *sql.Conn, tx *sql.Tx, args []any) error {
	h := &s.hours
	if len(h.misses) == 0 {
		return nil
	}
	cols := s.rows.writes.cols
	h.args = h.args[:0]
	for _, i := range h.misses {
		h.args = append(h.args, args[i*cols:(i+1)*cols]...)
	}
	defer clear(h.args) // keeps none of the batch's values
	if _, err := tx.ExecContext(ctx, `SAVEPOINT new_writes`); err != nil {
		return err
	}
	ins := s.rows.newWrites
	var inserted int64
	err := ins.chunks(len(h.misses), func(lo, hi int) error {
		res, err := ins.exec(ctx, conn, tx, h.args[lo*cols:hi*cols])
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		inserted += n
		return err
	})
	if err != nil {
		return err
	}
	if inserted == int64(len(h.misses)) {
		if _, err := tx.ExecContext(ctx, `RELEASE new_writes`); err != nil {
			return err
		}
		for i := 0; i < len(h.args); i += cols {
			r := h.args[i : i+cols]
			t, tenant := r[wcTime].(int64), r[wcTenant].(int64)
			k, _ := writeKeyOf(t, r[wcSeq].(int64), tenant, r[wcCallID])
			h.move(k, t, tenant, stateOf{}, false, stateOf{r[wcState].(int64), r[wcServer].(int64)})
		}
		return nil
	}
	// Some were stored (a re-sent batch, or writes the cache forgot):
	// undone, and upserted knowing what each replaces.
	if _, err := tx.ExecContext(ctx, `ROLLBACK TO new_writes`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `RELEASE new_writes`); err != nil {
		return err
	}
	up, before := s.rows.writes, s.rows.writesBefore
	return up.chunks(len(h.misses), func(lo, hi int) error {
		rows := h.args[lo*cols : hi*cols]
		clear(h.cur)
		h.keys = h.keys[:0]
		for i := 0; i < len(rows); i += cols {
			r := rows[i : i+cols]
			h.keys = append(h.keys, r[wcTime], r[wcCallID], r[wcSeq], r[wcTenant])
		}
		err := before.query(ctx, conn, tx, h.keys, h.dest, func(v []driver.Value) error {
			t, _ := v[0].(int64)
			seq, _ := v[2].(int64)
			tenant, _ := v[3].(int64)
			state, _ := v[4].(int64)
			server, _ := v[5].(int64)
			k, err := writeKeyOf(t, seq, tenant, v[1])
			if err != nil {
				return err
			}
			h.cur[k] = stateOf{state, server}
			return nil
		})
		clear(h.keys) // keeps none of the batch's values
		if err != nil {
			return err
		}
		for i := 0; i < len(rows); i += cols {
			r := rows[i : i+cols]
			t, tenant := r[wcTime].(int64), r[wcTenant].(int64)
			k, _ := writeKeyOf(t, r[wcSeq].(int64), tenant, r[wcCallID])
			was, ok := h.cur[k]
			h.move(k, t, tenant, was, ok, stateOf{r[wcState].(int64), r[wcServer].(int64)})
		}
		_, err = up.exec(ctx, conn, tx, rows)
		return err
	})
}

// store applies the batch's net changes to write_hours.
func (h *hourCounts) store(ctx context.Context, tx *sql.Tx) error {
	changed := make([]hourKey, 0, len(h.delta))
	for k, n := range h.delta {
		if n != 0 {
			changed = append(changed, k)
		}
	}
	slices.SortFunc(changed, func(a, b hourKey) int {
		return cmp.Or(cmp.Compare(a.hour, b.hour), cmp.Compare(a.tenant, b.tenant),
			cmp.Compare(a.server, b.server), cmp.Compare(a.state, b.state))
	})
	for _, k := range changed {
		q := sqlHoursAdd
		if h.delta[k] < 0 {
			q = sqlHoursSub
		}
		if _, err := tx.ExecContext(ctx, q, k.hour, k.tenant, k.server, k.state, h.delta[k]); err != nil {
			return err
		}
	}
	return nil
}
