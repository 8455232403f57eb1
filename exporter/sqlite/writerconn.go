package sqlite

import (
	"context"
	"database/sql/driver"
	"fmt"
	"sync/atomic"
)

// The committer's multi-row statements are prepared on the writer's
// driver connection (multiRow.exec) and kept for the batches after. But
// database/sql may close that connection by itself and open another: it
// discards one the driver calls unusable when it is given back (this
// driver does after a statement on it was interrupted by its context). A
// SQLite connection closed while statements prepared on it are not
// finalized stays open, a zombie holding its file descriptors and cache,
// until they are; and this driver cannot finalize them once it closed the
// connection (it panics). So the statements are kept on the connection
// they were prepared on, and its Close finalizes them first.

// writerConnector makes the writer's connections writerConns.
type writerConnector struct {
	driver.Connector
	// migrated is set by Open once the migrations are done: a connection
	// opened after (database/sql opens another when it discards one the
	// driver called unusable) is given the settings Open gives the first
	// one then, which the migrations run without. Nil: none.
	migrated *atomic.Bool
}

// afterMigrations are the settings of a writer's connection once the
// migrations are done (see Open).
const afterMigrations = `PRAGMA temp_store = MEMORY`

// Connect opens a connection of the writer.
func (c writerConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := dc.(sqliteConn)
	if !ok {
		dc.Close()
		return nil, fmt.Errorf("cannot use driver connection %T: it lacks an interface database/sql uses", dc)
	}
	if c.migrated != nil && c.migrated.Load() {
		if _, err := sc.ExecContext(ctx, afterMigrations, nil); err != nil {
			sc.Close()
			return nil, fmt.Errorf("cannot set %s on a new connection: %w", afterMigrations, err)
		}
	}
	return &writerConn{sqliteConn: sc, stmts: map[stmtKey]driver.Stmt{}}, nil
}

// sqliteConn is the driver's connection as database/sql uses it: every
// optional interface it implements, so that a writerConn offers them too
// (TestWriterConn_Interfaces).
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.Execer
	driver.ExecerContext
	driver.Queryer
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// writerConn is a connection of the writer with the multi-row statements
// prepared on it. database/sql does not use a connection from two
// goroutines at once, nor close one in use, so stmts needs no lock.
type writerConn struct {
	sqliteConn
	stmts map[stmtKey]driver.Stmt
}

// stmtKey names a multi-row statement: its multiRow and its rows.
type stmtKey struct {
	m    *multiRow
	rows int
}

// rollbackHook, when set (tests only), is called before the driver rolls
// back a transaction of the writer. It stands for a goroutine that a
// loaded machine runs late, which no real part shows on demand.
var rollbackHook func()

// BeginTx begins a transaction on c; with rollbackHook set, its Rollback
// calls the hook first.
func (c *writerConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.sqliteConn.BeginTx(ctx, opts)
	if err != nil || rollbackHook == nil {
		return tx, err
	}
	return hookedTx{Tx: tx, hook: rollbackHook}, nil
}

// hookedTx is a transaction whose Rollback calls hook first.
type hookedTx struct {
	driver.Tx
	hook func()
}

// Rollback calls the hook, then rolls back.
func (t hookedTx) Rollback() error {
	t.hook()
	return t.Tx.Rollback()
}

// Close finalizes the statements prepared on c, then closes it.
func (c *writerConn) Close() error {
	c.closeStmts()
	return c.sqliteConn.Close()
}

// closeStmts finalizes the statements prepared on c.
func (c *writerConn) closeStmts() {
	for _, st := range c.stmts {
		st.Close()
	}
	clear(c.stmts)
}
