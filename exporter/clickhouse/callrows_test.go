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
