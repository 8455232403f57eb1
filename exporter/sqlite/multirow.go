package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
)

// Each Exec through database/sql and the driver has a fixed cost
// (converting and binding the arguments, stepping and resetting the
// statement, allocations) of about 2.5 µs, a third of what storing a call
// row or a write state costs (BenchmarkRowStatements). The committer
// therefore stores calls, write states and session minutes with
// statements of several rows each.
//
// They bypass database/sql: its conversion of each statement's arguments
// (a new []driver.NamedValue of up to 416 values per write-state
// statement, and a statement per transaction) was 7 % of the bytes serve
// allocated. The committer prepares them on its driver connection
// (sql.Conn.Raw) and binds them from one reused slice.

// multiRow is a statement whose VALUES list is repeated for up to max rows
// (a power of two). A run of n rows is cut into chunks of max rows, then
// the rest in descending powers of two, so that log2(max)+1 statements
// cover every n; they are prepared once, on the committer's connection.
type multiRow struct {
	head, tail string // the statement before and after its VALUES list
	cols, max  int
	// nv is the arguments of the driver statement being executed (those
	// are kept on the connection: writerConn).
	nv []driver.NamedValue
	// stmts are database/sql's statements by rows, used when
	// driverStatements is false.
	stmts map[int]*sql.Stmt
}

// driverStatements is false in tests that compare what the statements
// store with what they store through database/sql.
var driverStatements = true

// newMultiRow returns the multiRow of query, a statement with one VALUES
// list of cols placeholders.
func newMultiRow(query string, cols, max int) *multiRow {
	head, tail, ok := strings.Cut(query, valuesList(1, cols))
	if !ok {
		panic(fmt.Sprintf("sqlite: no VALUES list of %d columns in %s", cols, query))
	}
	return &multiRow{head: head, tail: tail, cols: cols, max: max, stmts: map[int]*sql.Stmt{}}
}

// valuesList returns "(?, ?), (?, ?)" for rows rows of cols columns.
func valuesList(rows, cols int) string {
	one := "(" + strings.Repeat("?, ", cols-1) + "?)"
	return strings.Repeat(one+", ", rows-1) + one
}

// prepare prepares database/sql's statements on db (driverStatements
// false); it must not be called inside a transaction of db's only
// connection.
func (m *multiRow) prepare(ctx context.Context, db *sql.DB) error {
	for rows := m.max; rows >= 1; rows /= 2 {
		if m.stmts[rows] != nil {
			continue
		}
		st, err := db.PrepareContext(ctx, m.head+valuesList(rows, m.cols)+m.tail)
		if err != nil {
			return err
		}
		m.stmts[rows] = st
	}
	return nil
}

// close closes database/sql's statements.
func (m *multiRow) close() {
	for _, st := range m.stmts {
		st.Close()
	}
	clear(m.stmts)
}

// chunks calls f with the bounds of each chunk of n rows, in order.
func (m *multiRow) chunks(n int, f func(lo, hi int) error) error {
	for lo := 0; lo < n; {
		size := m.max
		for size > n-lo {
			size /= 2
		}
		if err := f(lo, lo+size); err != nil {
			return err
		}
		lo += size
	}
	return nil
}

// exec executes the statement of len(args)/cols rows in tx, which is open
// on conn. Each argument must be a driver.Value (int64, not int).
func (m *multiRow) exec(ctx context.Context, conn *sql.Conn, tx *sql.Tx, args []any) (sql.Result, error) {
	rows := len(args) / m.cols
	if !driverStatements {
		st := m.stmts[rows]
		if st == nil {
			return nil, fmt.Errorf("no statement of %d rows prepared", rows)
		}
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	var res driver.Result
	err := conn.Raw(func(dc any) error {
		st, err := m.driverStmt(ctx, dc, rows)
		if err != nil {
			return err
		}
		nv := m.nv[:0]
		for i, a := range args {
			nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: a})
		}
		res, err = st.ExecContext(ctx, nv)
		clear(nv) // keeps none of the batch's values
		m.nv = nv
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// driverStmt returns the statement of rows rows prepared on the writer's
// driver connection dc, preparing it when it is not (SQLite prepares
// within a transaction as well). A new connection (database/sql closed the
// one before, whose Close finalized the statements prepared on it) has
// them prepared again.
func (m *multiRow) driverStmt(ctx context.Context, dc any, rows int) (driver.StmtExecContext, error) {
	wc, ok := dc.(*writerConn)
	if !ok {
		return nil, fmt.Errorf("driver connection %T is not the writer's", dc)
	}
	key := stmtKey{m, rows}
	st := wc.stmts[key]
	if st == nil {
		if rows < 1 || rows > m.max || rows&(rows-1) != 0 {
			return nil, fmt.Errorf("no statement of %d rows", rows)
		}
		var err error
		if st, err = wc.PrepareContext(ctx, m.head+valuesList(rows, m.cols)+m.tail); err != nil {
			return nil, err
		}
		wc.stmts[key] = st
	}
	ex, ok := st.(driver.StmtExecContext)
	if !ok {
		return nil, fmt.Errorf("driver statement %T cannot execute with a context", st)
	}
	return ex, nil
}

// sameID reports whether two stored ids (packID) are the same.
func sameID(a, b any) bool {
	switch a := a.(type) {
	case []byte:
		b, ok := b.([]byte)
		return ok && bytes.Equal(a, b)
	case string:
		b, ok := b.(string)
		return ok && a == b
	}
	return false
}
