package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Each Exec through database/sql and the driver has a fixed cost
// (converting and binding the arguments, stepping and resetting the
// statement, allocations) of about 2.5 µs, a third of what storing a call
// row or a write state costs (BenchmarkRowStatements). The committer
// therefore stores calls, write states and session minutes with
// statements of several rows each.

// multiRow is a statement whose VALUES list is repeated for up to max rows
// (a power of two). A run of n rows is cut into chunks of max rows, then
// the rest in descending powers of two, so that log2(max)+1 statements
// cover every n; they are prepared once, on the committer's connection.
type multiRow struct {
	head, tail string // the statement before and after its VALUES list
	cols, max  int
	stmts      map[int]*sql.Stmt // by rows
}

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

// prepare prepares the statements on db; it must not be called inside a
// transaction of db's only connection.
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

// exec executes the statement of len(args)/cols rows in tx.
func (m *multiRow) exec(ctx context.Context, tx *sql.Tx, args []any) error {
	st, err := m.stmt(ctx, tx, len(args)/m.cols)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(ctx, args...)
	return err
}

// stmt returns the statement of rows rows for tx.
func (m *multiRow) stmt(ctx context.Context, tx *sql.Tx, rows int) (*sql.Stmt, error) {
	st := m.stmts[rows]
	if st == nil {
		return nil, fmt.Errorf("no statement of %d rows prepared", rows)
	}
	return tx.StmtContext(ctx, st), nil
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
