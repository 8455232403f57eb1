package sqlite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
	"github.com/mcpaudit/mcpaudit/internal/procstat"
)

// rowsPerTx is how many rows one transaction of the row benchmarks holds:
// a request of one OpenTelemetry SDK exporter.
const rowsPerTx = 512

// BenchmarkRowStatements measures the fixed cost of a statement through
// database/sql and modernc.org/sqlite: 512 call rows, or 512 write states,
// stored in one transaction (one op) one Exec per row ("one") or a
// multi-row statement per chunk of rows ("multiN"). Writes are upserted
// with the write_hours triggers (writes) and without them
// (writes_notriggers), which gives the triggers' share. It reports the CPU
// per row; the transaction's COMMIT is outside the timer.
//
//	go test -run '^$' -bench RowStatements -benchtime 200x ./exporter/sqlite/
func BenchmarkRowStatements(b *testing.B) {
	recs := pool(b, 20000)
	// calls_returning reads the rows stored back (RETURNING rid, id,
	// tenant, time), as a multi-row statement must to learn which input
	// got which rid.
	for _, bc := range []struct {
		name   string
		chunks []int
		query  string
	}{
		{"calls", []int{1, 16, 64, 256}, sqlInsertCall},
		{"calls_returning", []int{1, 64}, sqlInsertCall + ` RETURNING rid, id, tenant, time`},
	} {
		for _, chunk := range bc.chunks {
			b.Run(fmt.Sprintf("%s/multi%d", bc.name, chunk), func(b *testing.B) {
				s := openTemp(b, Options{})
				defer s.Close()
				n := uint64(0)
				benchRows(b, s, chunk, bc.query, 4, func() []any {
					n++
					r := fresh(recs[n%uint64(len(recs))], n)
					rows, err := encodeCalls([]audit.Record{r})
					if err != nil {
						b.Fatal(err)
					}
					c := rows[0]
					return []any{c.id, 1, c.time, c.rec}
				})
			})
		}
	}
	for _, triggers := range []bool{true, false} {
		name := "writes"
		if !triggers {
			name = "writes_notriggers"
		}
		for _, chunk := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/multi%d", name, chunk), func(b *testing.B) {
				s := openTemp(b, Options{})
				defer s.Close()
				if !triggers {
					for _, t := range []string{"write_hours_insert", "write_hours_update", "write_hours_delete"} {
						if _, err := s.w.Exec(`DROP TRIGGER ` + t); err != nil {
							b.Fatal(err)
						}
					}
				}
				n := int64(0)
				t0 := storetest.T0.UnixNano()
				benchRows(b, s, chunk, sqlUpsertWrite, 13, func() []any {
					n++
					// Half new rows, half a later state of the row before
					// the previous (pending, then durable), as the
					// detector sends them.
					i, state := n, int64(1)
					if n%2 == 0 {
						i, state = n-3, 2
					}
					return []any{packID(callPrefix, fmt.Sprintf("c_%020x", i)), 0, t0 + i*int64(time.Millisecond),
						state, 3, 4, 5, 6, 7, "sess", "doc", "key", 1000}
				})
			})
		}
	}
}

// benchRows stores rowsPerTx rows a transaction with statements of chunk
// rows each (query's VALUES repeated), args giving each row's arguments.
func benchRows(b *testing.B, s *Store, chunk int, query string, cols int, args func() []any) {
	// As valuesList (multirow.go), which a build before it lacks.
	valuesList := func(rows, cols int) string {
		one := "(" + strings.Repeat("?, ", cols-1) + "?)"
		return strings.Repeat(one+", ", rows-1) + one
	}
	head, tail, ok := strings.Cut(query, valuesList(1, cols))
	if !ok {
		b.Fatalf("no VALUES list of %d columns in %s", cols, query)
	}
	multi := head + valuesList(chunk, cols) + tail
	ctx := context.Background()
	var cpu time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		rows := make([][]any, rowsPerTx)
		for i := range rows {
			rows[i] = args()
		}
		b.StartTimer()
		cpu0 := procstat.CPU()
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		stmt, err := tx.Prepare(multi)
		if err != nil {
			b.Fatal(err)
		}
		flat := make([]any, 0, chunk*cols)
		for i := 0; i < len(rows); i += chunk {
			flat = flat[:0]
			for _, r := range rows[i:min(i+chunk, len(rows))] {
				flat = append(flat, r...)
			}
			st := stmt
			if len(flat) < chunk*cols { // the last, short chunk
				if st, err = tx.Prepare(head + valuesList(len(flat)/cols, cols) + tail); err != nil {
					b.Fatal(err)
				}
			}
			if !strings.Contains(query, "RETURNING") {
				if _, err := st.Exec(flat...); err != nil {
					b.Fatal(err)
				}
				continue
			}
			rows, err := st.Query(flat...)
			if err != nil {
				b.Fatal(err)
			}
			for rows.Next() {
				var rid, tenant, t int64
				var id any
				if err := rows.Scan(&rid, &id, &tenant, &t); err != nil {
					b.Fatal(err)
				}
			}
			if err := rows.Close(); err != nil {
				b.Fatal(err)
			}
		}
		cpu += procstat.CPU() - cpu0
		b.StopTimer()
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu)/1e3/float64(b.N*rowsPerTx), "cpu-µs/row")
}

// BenchmarkCommitWrites measures the detector's write states through the
// store's Commit path, alone: each op commits 512 of them, 256 new
// (pending) and the next state (durable) of the previous op's 256, as the
// engine sends them. It reports the process's CPU per write.
//
//	go test -run '^$' -bench CommitWrites -benchtime 200x ./exporter/sqlite/
func BenchmarkCommitWrites(b *testing.B) {
	s := openTemp(b, Options{})
	defer s.Close()
	ctx := context.Background()
	var prev []audit.Write
	next := 0
	cpu0 := procstat.CPU()
	b.ResetTimer()
	for range b.N {
		ws := make([]audit.Write, 0, rowsPerTx)
		for _, w := range prev {
			w.State, w.Reason = audit.StateDurable, ""
			w.StateTime = w.Time.Add(time.Second)
			ws = append(ws, w)
		}
		prev = prev[:0]
		for range rowsPerTx / 2 {
			next++
			w := benchWrite(next)
			ws = append(ws, w)
			prev = append(prev, w)
		}
		if err := s.Commit(ctx, audit.Results{Writes: ws}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(procstat.CPU()-cpu0)/1e3/float64(b.N*rowsPerTx), "cpu-µs/write")
	b.ReportMetric(float64(b.N*rowsPerTx)/b.Elapsed().Seconds(), "writes/s")
}

// benchWrite returns the n-th generated write, pending.
func benchWrite(n int) audit.Write {
	return audit.Write{
		CallID: fmt.Sprintf("c_%020x", n*7919), Seq: n % 3, Time: storetest.T0.Add(time.Duration(n) * time.Millisecond),
		Server: fmt.Sprintf("server-%d", n%4), Tenant: "acme", Session: fmt.Sprintf("s-%d", n/20),
		Tool: "update_document", Document: fmt.Sprintf("doc-%d", n%500), Key: "body",
		State: audit.StatePending, Reason: audit.ReasonNoResponse, StateTime: storetest.T0.Add(time.Duration(n) * time.Millisecond),
	}
}
