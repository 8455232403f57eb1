package sqlite

import (
	"context"
	"database/sql/driver"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	sqlite "modernc.org/sqlite"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

func TestMultiRow_Chunks(t *testing.T) {
	f := func(n, max int, want string) {
		t.Helper()
		m := &multiRow{max: max}
		var got []string
		if err := m.chunks(n, func(lo, hi int) error {
			got = append(got, fmt.Sprintf("%d-%d", lo, hi))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if s := strings.Join(got, " "); s != want {
			t.Errorf("chunks(%d) of %d: %q, want %q", n, max, s, want)
		}
	}
	f(0, 64, "")
	f(1, 64, "0-1")
	f(64, 64, "0-64")
	f(65, 64, "0-64 64-65")
	f(135, 64, "0-64 64-128 128-132 132-134 134-135")
	f(3, 1, "0-1 1-2 2-3")
}

// rowBatches returns the batches of requests of the multi-row test, new
// each time (a commit sets their stored counts), and how many calls each
// request stores. They hold copies of calls: in one request, in two
// requests of a batch, in a later batch, across statements (the 64th and
// 65th call of a batch), of one id in the same millisecond at another
// nanosecond (a copy), in another millisecond and in another tenant (not
// copies); ids that do not pack; and writes whose states change within a
// batch and across batches.
func rowBatches(t *testing.T) ([][]*request, [][]int64) {
	g, err := storetest.NewGenerator(11, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	base := g.Records(200)
	for i := range base {
		c := *base[i].Call
		c.Time = c.Time.Truncate(time.Millisecond)
		base[i].Call = &c
	}
	with := func(r audit.Record, f func(c *audit.Call)) audit.Record {
		c := *r.Call
		f(&c)
		r.Call = &c
		return r
	}
	calls := func(recs ...audit.Record) *request {
		rows, err := encodeCalls(recs)
		if err != nil {
			t.Fatal(err)
		}
		return &request{calls: rows, watermark: zeroTime}
	}
	results := func(r audit.Results) *request {
		req, err := encodeResults(&r)
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	write := func(r audit.Record, seq int, st audit.WriteState, after time.Duration) audit.Write {
		return audit.Write{CallID: r.Call.ID, Seq: seq, Time: r.Call.Time, Server: r.Call.Server, Tenant: r.Call.Tenant,
			Session: r.Call.Session, Tool: r.Call.Tool, Document: "doc", Key: "k", State: st, StateTime: r.Call.Time.Add(after)}
	}
	// Batch 1: 100 calls in one request, the 64th repeated as the 65th
	// (the next statement) and the 3rd as the 10th; then a request with
	// a copy of the 5th, the 5th in another tenant, in another
	// millisecond, at another nanosecond of its millisecond, and two
	// calls with text ids, one twice.
	first := append([]audit.Record(nil), base[:100]...)
	first[64] = first[63]
	first[9] = first[2]
	text := with(base[150], func(c *audit.Call) { c.ID = "custom-id" })
	b1 := []*request{
		calls(first...),
		calls(base[4],
			with(base[4], func(c *audit.Call) { c.Tenant = "acme" }),
			with(base[4], func(c *audit.Call) { c.Time = c.Time.Add(5 * time.Millisecond) }),
			with(base[4], func(c *audit.Call) { c.Time = c.Time.Add(100 * time.Microsecond) }),
			text, text,
			with(base[151], func(c *audit.Call) { c.ID = "custom-id"; c.Tenant = "acme" })),
		results(audit.Results{Writes: []audit.Write{
			write(base[0], 0, audit.StatePending, 0), write(base[1], 0, audit.StatePending, 0),
			write(base[1], 1, audit.StatePending, 0), write(base[0], 0, audit.StateDurable, time.Second),
		}, Watermark: storetest.T0.Add(time.Minute)}),
		calls(base[100:130]...),
	}
	// Batch 2: copies of stored calls mixed with new ones, across
	// statement bounds, and more write states.
	var second []audit.Record
	for i := 60; i < 200; i++ {
		second = append(second, base[i])
		if i%7 == 0 {
			second = append(second, base[i-50]) // stored in batch 1 when i-50 < 130
		}
	}
	var ws []audit.Write
	for i := range 70 {
		ws = append(ws, write(base[i], 0, audit.StatePending, 0))
	}
	ws = append(ws, write(base[1], 1, audit.StateUnverified, time.Minute), write(base[0], 0, audit.StatePending, 0))
	b2 := []*request{
		calls(second...),
		results(audit.Results{Writes: ws, Watermark: storetest.T0.Add(2 * time.Minute)}),
		results(audit.Results{Watermark: storetest.T0.Add(3 * time.Minute)}),
		calls(base[0], base[199], with(base[199], func(c *audit.Call) { c.Tenant = "acme" })),
	}
	// Stored counts: batch 1's first request stores 98 (two copies); the
	// second the other tenant, the other millisecond and one text id per
	// tenant: 4; the fourth 30. Batch 2's first stores base[130:200]
	// and base[64], which batch 1 held only as a copy of base[63]: 71;
	// the last the copy of base[199] in acme: 1.
	return [][]*request{b1, b2}, [][]int64{{98, 4, 0, 30}, {71, 0, 0, 1}}
}

// storeRowBatches commits the batches directly (the committer is idle)
// with the given rows per statement, and returns what the file holds.
func storeRowBatches(t *testing.T, perStatement int) map[string][]string {
	if perStatement > 0 {
		defer func(c, w, s int) { callsPerStatement, writesPerStatement, sessionsPerStatement = c, w, s }(
			callsPerStatement, writesPerStatement, sessionsPerStatement)
		callsPerStatement, writesPerStatement, sessionsPerStatement = perStatement, perStatement, perStatement
	}
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	batches, want := rowBatches(t)
	for i, batch := range batches {
		n := 0
		for _, r := range batch {
			n += len(r.calls)
		}
		if err := s.commitBatch(batch, n); err != nil {
			t.Fatal(err)
		}
		for j, r := range batch {
			if r.stored != want[i][j] {
				t.Errorf("%d per statement: batch %d, request %d stored %d calls, want %d", perStatement, i, j, r.stored, want[i][j])
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Each chain entry digests the calls it names, as stored: a commit
	// that chained another tenant's hashes, or the last batch's, fails it.
	if r := verify(t, path, nil); len(r.Problems) > 0 || r.Calls == 0 || r.Tenants < 2 {
		t.Errorf("%d per statement: verify: %d tenants, %d calls, problems %+v", perStatement, r.Tenants, r.Calls, r.Problems)
	}
	db := side(t, path)
	out := map[string][]string{}
	for name, q := range map[string]string{
		"calls":           `SELECT rid, hex(id), typeof(id), tenant, time, hex(rec) FROM calls ORDER BY rid`,
		"strs":            `SELECT id, s FROM strs ORDER BY id`,
		"writes":          `SELECT * FROM writes ORDER BY time, call_id, seq, tenant`,
		"write_hours":     `SELECT * FROM write_hours ORDER BY hour, tenant, server, state`,
		"session_minutes": `SELECT * FROM session_minutes ORDER BY sh, minute`,
		"meta":            `SELECT key, value FROM meta WHERE key IN ('watermark', '` + sessionsIndexed + `') ORDER BY key`,
		// The entries' times differ between runs, and with them their
		// hashes; what they cover does not.
		"chain":     `SELECT tenant, seq, kind, first, last, n, hex(digest) FROM chain ORDER BY tenant, seq`,
		"sequences": `SELECT name, seq FROM sqlite_sequence ORDER BY name`,
		// The storage classes, which fmt.Sprint above does not tell apart
		// (an integer 7 and a text "7" print alike).
		"types": `SELECT 'calls', typeof(rid), typeof(id), typeof(tenant), typeof(time), typeof(rec), count(*) FROM calls GROUP BY 2, 3, 4, 5, 6
			UNION ALL SELECT 'writes', typeof(time) || typeof(call_id) || typeof(seq) || typeof(state) || typeof(server) || typeof(tenant),
				typeof(tool) || typeof(reason) || typeof(action), typeof(session) || typeof(document) || typeof(key), typeof(state_after), '', count(*)
				FROM writes GROUP BY 2, 3, 4, 5
			UNION ALL SELECT 'session_minutes', typeof(sh), typeof(minute), '', '', '', count(*) FROM session_minutes GROUP BY 2, 3
			ORDER BY 1, 2, 3, 4, 5, 6`,
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out[name] = append(out[name], fmt.Sprint(vals...))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return out
}

// TestMultiRow_AsOneRow checks that multi-row statements store exactly
// what one statement per row stores: the same call rows under the same
// rids (copies take a rid too), the same stored counts per request, write
// states, rollups, session minutes, interned strings and chain entries.
func TestMultiRow_AsOneRow(t *testing.T) {
	one := storeRowBatches(t, 1)
	multi := storeRowBatches(t, 0)
	if n := len(one["calls"]); n != 98+4+30+71+1 {
		t.Errorf("%d calls stored, want %d", n, 98+4+30+71+1)
	}
	for name, rows := range one {
		if len(rows) == 0 {
			t.Errorf("%s: no rows", name)
		}
		if !reflect.DeepEqual(rows, multi[name]) {
			t.Errorf("%s differs:\none row per statement:\n%s\nmulti-row:\n%s", name, strings.Join(rows, "\n"), strings.Join(multi[name], "\n"))
		}
	}
	if len(one) != len(multi) {
		t.Errorf("tables: %d against %d", len(one), len(multi))
	}
}

// TestMultiRow_DriverAsDatabaseSQL checks that the multi-row statements
// store through the driver connection (multiRow.exec) exactly what they
// store through database/sql, which converts each argument itself: the
// same rows, values and storage classes, rids, rollups and chain entries.
func TestMultiRow_DriverAsDatabaseSQL(t *testing.T) {
	defer func(d bool) { driverStatements = d }(driverStatements)
	driverStatements = false
	viaSQL := storeRowBatches(t, 0)
	driverStatements = true
	viaDriver := storeRowBatches(t, 0)
	if len(viaSQL["types"]) < 3 {
		t.Errorf("storage classes: %q", viaSQL["types"])
	}
	for name, rows := range viaSQL {
		if len(rows) == 0 {
			t.Errorf("%s: no rows", name)
		}
		if !reflect.DeepEqual(rows, viaDriver[name]) {
			t.Errorf("%s differs:\nthrough database/sql:\n%s\nthrough the driver:\n%s", name, strings.Join(rows, "\n"), strings.Join(viaDriver[name], "\n"))
		}
	}
	if len(viaSQL) != len(viaDriver) {
		t.Errorf("tables: %d against %d", len(viaSQL), len(viaDriver))
	}
}

// TestWriteHours_MatchWrites checks that write_hours, which triggers keep
// row by row, counts the writes by hour, tenant, server and state after
// multi-row upserts (one holding two states of a write), state and server
// changes, and retention.
func TestWriteHours_MatchWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := side(t, path)
	check := func(step string) {
		t.Helper()
		read := func(q string) []string {
			rows, err := db.Query(q)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var out []string
			for rows.Next() {
				var h, tenant, server, state, n int64
				if err := rows.Scan(&h, &tenant, &server, &state, &n); err != nil {
					t.Fatal(err)
				}
				out = append(out, fmt.Sprint(h, tenant, server, state, n))
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		}
		hours := read(`SELECT hour, tenant, server, state, n FROM write_hours WHERE n != 0 ORDER BY 1, 2, 3, 4`)
		want := read(`SELECT time / 3600000000000, tenant, server, state, count(*) FROM writes GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`)
		if len(want) == 0 {
			t.Fatalf("%s: no writes", step)
		}
		if !reflect.DeepEqual(hours, want) {
			t.Errorf("%s: write_hours\n%s\nwant\n%s", step, strings.Join(hours, "\n"), strings.Join(want, "\n"))
		}
	}
	ctx := t.Context()
	var ws []audit.Write
	for i := range 300 {
		w := benchWrite(i)
		w.Time = storetest.T0.Add(time.Duration(i) * 36 * time.Second) // three hours
		w.Tenant = []string{"", "acme"}[i%2]
		ws = append(ws, w)
		if i%5 == 0 { // its next state in the same statement
			w.State, w.Reason = audit.StateDurable, ""
			ws = append(ws, w)
		}
	}
	if err := s.Commit(ctx, audit.Results{Writes: ws}); err != nil {
		t.Fatal(err)
	}
	check("stored")
	var next []audit.Write
	for i, w := range ws {
		switch i % 3 {
		case 0:
			w.State = audit.StateUnverified
		case 1:
			w.Server = "moved"
		}
		next = append(next, w)
	}
	if err := s.Commit(ctx, audit.Results{Writes: next}); err != nil {
		t.Fatal(err)
	}
	check("updated")
	if _, err := s.DeleteBefore(ctx, storetest.T0.Add(90*time.Minute)); err != nil {
		t.Fatal(err)
	}
	check("after retention")
}

// TestMultiRow_SequenceBehind checks that rids are found when
// sqlite_sequence is behind the largest rid (a file edited or migrated by
// hand): AUTOINCREMENT gives out rids past both.
func TestMultiRow_SequenceBehind(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	recs := records(t, 11)
	if n, err := s.AppendCalls(ctx, recs[:10]); err != nil || n != 10 {
		t.Fatalf("stored %d, %v; want 10", n, err)
	}
	if _, err := side(t, path).Exec(`UPDATE sqlite_sequence SET seq = 2 WHERE name = 'calls'`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.AppendCalls(ctx, []audit.Record{recs[3], recs[10], recs[10]}); err != nil || n != 1 {
		t.Fatalf("stored %d, %v; want 1", n, err)
	}
	if n, err := s.AppendCalls(ctx, recs[9:]); err != nil || n != 0 {
		t.Fatalf("stored %d, %v; want 0", n, err)
	}
	if n := count(t, s); n != 11 {
		t.Errorf("%d calls stored, want 11", n)
	}
	// The copy before it took rid 11 (one past the largest), the new
	// call 12; the chain names it so.
	var rid int64
	if err := side(t, path).QueryRow(`SELECT last FROM chain ORDER BY seq DESC LIMIT 1`).Scan(&rid); err != nil || rid != 12 {
		t.Errorf("last chained rid %d, %v; want 12", rid, err)
	}
	r, err := Verify(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) > 0 || r.Calls != 11 {
		t.Errorf("verify: %d calls, problems %v", r.Calls, r.Problems)
	}
}

// TestWriter_TempStoreMemory checks that the committer's connection keeps
// its statement journals in memory (PRAGMA temp_store 2): a multi-row
// upsert of write states spilled its journal to a temporary file, a pwrite
// per page changed.
func TestWriter_TempStoreMemory(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "audit.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mode int
	if err := s.w.QueryRow(`PRAGMA temp_store`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != 2 {
		t.Errorf("temp_store %d on the writer, want 2 (memory)", mode)
	}
}

// writerDriverConn returns the driver connection the writer holds now.
func writerDriverConn(t *testing.T, s *Store) any {
	t.Helper()
	conn, err := s.w.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var dc any
	conn.Raw(func(c any) error { dc = c; return nil })
	return dc
}

// openFiles counts this process's open file descriptors on the files
// whose names start with path (the database, its log and its index).
func openFiles(t *testing.T, path string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("SKIPPED: cannot count open files without /proc/self/fd: %v", err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, path) {
			n++
		}
	}
	return n
}

// TestMultiRow_ConnectionReplaced: when database/sql closes the writer's
// connection by itself and opens another, the multi-row statements
// prepared on the old one are finalized with it. They were forgotten
// instead, which left the old SQLite connection open as a zombie (its
// file descriptors and cache) for as long as the process ran. The real
// driver shows it: a statement on the writer interrupted by its context
// makes the connection unusable, and database/sql replaces it. (No path
// of the store runs a writer statement under a context that ends today;
// the commits run under context.Background.)
func TestMultiRow_ConnectionReplaced(t *testing.T) {
	s := openTemp(t, Options{})
	defer s.Close()
	ctx := context.Background()
	recs := records(t, 130)
	if _, err := s.AppendCalls(ctx, recs[:100]); err != nil {
		t.Fatal(err)
	}
	files := openFiles(t, s.path)
	replaceWriterConn(t, s)
	if _, err := s.AppendCalls(ctx, recs[100:]); err != nil {
		t.Fatalf("the commit on the new connection: %v", err)
	}
	if n := count(t, s); n != len(recs) {
		t.Errorf("%d calls stored, want %d", n, len(recs))
	}
	if now := openFiles(t, s.path); now != files {
		t.Errorf("%d files open on the store, %d before its connection was replaced: the old connection was not closed", now, files)
	}
}

// replaceWriterConn has database/sql replace the writer's connection, as
// the real driver makes it: a statement on the writer interrupted by its
// context makes the connection unusable.
func replaceWriterConn(t *testing.T, s *Store) {
	t.Helper()
	old := writerDriverConn(t, s)
	// A statement that ends only when interrupted. When its context ends
	// before the driver starts it, it is not interrupted: try again,
	// waiting longer.
	for wait := time.Millisecond; writerDriverConn(t, s) == old; wait *= 4 {
		if wait > 10*time.Second {
			t.Fatal("the writer's connection was not replaced")
		}
		qctx, cancel := context.WithTimeout(context.Background(), wait)
		var n int64
		err := s.w.QueryRowContext(qctx, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c`).Scan(&n)
		cancel()
		if err == nil {
			t.Fatalf("an endless statement ended with %d rows", n)
		}
	}
}

// TestWriterConn_TempStoreKept: a writer's connection that database/sql
// opens again after the migrations keeps temp_store in memory, as Open set
// it on the first one; it was lost, and the statement journals of the
// upserts spilled to a temporary file again.
func TestWriterConn_TempStoreKept(t *testing.T) {
	s := openTemp(t, Options{})
	defer s.Close()
	tempStore := func() int {
		t.Helper()
		var v int
		if err := s.w.QueryRow(`PRAGMA temp_store`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	const memory = 2
	if v := tempStore(); v != memory {
		t.Fatalf("temp_store %d after Open, want %d (MEMORY)", v, memory)
	}
	for i := range 2 {
		replaceWriterConn(t, s)
		if v := tempStore(); v != memory {
			t.Errorf("temp_store %d on the connection opened again (%d), want %d (MEMORY)", v, i+1, memory)
		}
	}
	// The store still commits on it.
	if _, err := s.AppendCalls(context.Background(), records(t, 10)); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s); n != 10 {
		t.Errorf("%d calls stored, want 10", n)
	}
}

// TestWriterConn_Interfaces: a writerConn offers every optional interface
// of database/sql that the driver's connection implements, so that
// database/sql uses the writer's connections as it would the driver's.
func TestWriterConn_Interfaces(t *testing.T) {
	cn, err := sqlite.NewConnector("file:" + filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	dc, err := cn.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	wc, err := writerConnector{Connector: cn}.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	for _, iface := range []reflect.Type{
		reflect.TypeFor[driver.Conn](),
		reflect.TypeFor[driver.ConnBeginTx](),
		reflect.TypeFor[driver.ConnPrepareContext](),
		reflect.TypeFor[driver.Execer](),
		reflect.TypeFor[driver.ExecerContext](),
		reflect.TypeFor[driver.Queryer](),
		reflect.TypeFor[driver.QueryerContext](),
		reflect.TypeFor[driver.Pinger](),
		reflect.TypeFor[driver.SessionResetter](),
		reflect.TypeFor[driver.Validator](),
		reflect.TypeFor[driver.NamedValueChecker](),
	} {
		if reflect.TypeOf(dc).Implements(iface) && !reflect.TypeOf(wc).Implements(iface) {
			t.Errorf("the driver's connection %T is a %v, a writerConn is not", dc, iface)
		}
	}
}
