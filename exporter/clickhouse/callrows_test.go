package clickhouse

import (
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestCallRows checks that the rows made on several goroutines are the
// ones a loop makes, in order, and that the error is the first failing
// call's, wherever it falls.
func TestCallRows(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	pool := benchPool(t, 1000)
	for _, n := range []int{1, rowsPerWorker - 1, 2 * rowsPerWorker, 512, 1000} {
		got, err := callRows(pool[:n])
		if err != nil {
			t.Fatalf("%d calls: %v", n, err)
		}
		if len(got) != n {
			t.Fatalf("%d calls: %d rows", n, len(got))
		}
		for i := range n {
			want, err := callRowOf(&pool[i])
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got[i], want) {
				t.Fatalf("%d calls: row %d differs from callRowOf's:\n got %+v\nwant %+v", n, i, got[i], want)
			}
		}
	}
	bad := func(recs []audit.Record, i int, id string) {
		c := *recs[i].Call
		c.ID = id
		recs[i].Call = &c
	}
	recs := append([]audit.Record(nil), pool[:512]...)
	// Two bad calls in different workers' shares: the earlier one is told.
	bad(recs, 400, "")
	bad(recs, 300, "")
	recs[300].Call.Source = "first-bad"
	if _, err := callRows(recs); err == nil || !strings.Contains(err.Error(), "first-bad") {
		t.Fatalf("err = %v, want the error of call 300 (source first-bad)", err)
	}
}

// BenchmarkCallRows measures making the rows of one 512-call request, the
// part of AppendCalls before the request is queued for the spool.
func BenchmarkCallRows(b *testing.B) {
	pool := benchPool(b, 512)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := callRows(pool); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pool)), "ns/call")
}

// BenchmarkAddCalls measures taking one 512-call request into a new batch,
// what the writer does before the batch is encoded for the spool.
func BenchmarkAddCalls(b *testing.B) {
	rows, err := callRows(benchPool(b, 512))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		new(batch).addCalls(rows)
	}
}

// TestTakeCalls checks that a batch taking a request's rows keeps the
// first row of each id, in order, as addCalls does, whether it starts
// empty or not.
func TestTakeCalls(t *testing.T) {
	pool, err := callRows(benchPool(t, 8))
	if err != nil {
		t.Fatal(err)
	}
	ids := func(rows []callRow) (out []string) {
		for _, r := range rows {
			out = append(out, r.ID+"/"+r.Server)
		}
		return out
	}
	// Rows 0..5 with row 1 repeated at 3 (another server: the first wins)
	// and row 0 at 5.
	req := func() []callRow {
		rows := append([]callRow(nil), pool[:6]...)
		rows[3] = pool[1]
		rows[3].Server = "second copy"
		rows[5] = pool[0]
		rows[5].Server = "second copy"
		return rows
	}
	var want batch
	want.addCalls(req())
	want.addCalls(pool[6:8])
	want.addCalls(req())
	var got batch
	got.takeCalls(req())
	got.takeCalls(pool[6:8])
	got.takeCalls(req())
	if !reflect.DeepEqual(ids(got.Calls), ids(want.Calls)) {
		t.Fatalf("takeCalls kept %v, addCalls %v", ids(got.Calls), ids(want.Calls))
	}
	if len(got.Calls) != 6 {
		t.Fatalf("kept %d rows, want 6 distinct ids", len(got.Calls))
	}
	for _, r := range got.Calls {
		if r.Server == "second copy" {
			t.Fatalf("a repeated id's second row was kept: %+v", r.ID)
		}
	}
}

// BenchmarkTakeCalls is BenchmarkAddCalls as the writer takes a request
// now: the rows become the batch's.
func BenchmarkTakeCalls(b *testing.B) {
	rows, err := callRows(benchPool(b, 512))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		new(batch).takeCalls(rows)
	}
}
