package clickhouse

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// The figures of docs/clickhouse.md come from these benchmarks, with the
// server of scripts/clickhouse.sh on the same machine:
//
//	eval "$(scripts/clickhouse.sh start)"
//	go test -run '^$' -bench . -benchtime 1x -v ./exporter/clickhouse/

// benchPool returns n generated call records to draw benchmark batches from.
func benchPool(tb testing.TB, n int) []audit.Record {
	tb.Helper()
	g, err := storetest.NewGenerator(1, storetest.T0)
	if err != nil {
		tb.Fatal(err)
	}
	return g.Records(n)
}

// fresh returns a copy of r with a new random id (ids are hashes in real
// traffic) and the n-th time of a stream of 100000 calls per second. The
// generator spreads its calls over weeks; at the rates measured here a
// batch falls in one day partition, as it does in production.
func fresh(r audit.Record, n uint64) audit.Record {
	c := *r.Call
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], splitmix(n))
	binary.LittleEndian.PutUint64(b[8:], splitmix(n^0xabcdef))
	c.ID = "c_" + hex.EncodeToString(b[:10])
	c.Time = storetest.T0.Add(time.Duration(n) * 10 * time.Microsecond)
	r.Call = &c
	return r
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// BenchmarkIngest measures AppendCalls throughput: 8 goroutines append
// batches of 2500 generated calls each (as OTLP exports of that many spans
// would) until b.N*100000 calls are stored, with the default batch limits.
// It reports calls per second, acknowledged by ClickHouse (none spooled).
// The appenders keep 20000 calls outstanding: more than BatchSize, so that
// batches leave full rather than after BatchAge.
func BenchmarkIngest(b *testing.B) {
	const workers, batch, perN = 8, 2500, 100000
	o := testOptions(b)
	o.BatchAge = NewDefaultOptions().BatchAge
	s := openStore(b, o)
	recs := benchPool(b, 20000)
	total := b.N * perN
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]audit.Record, batch)
			for {
				j := next.Add(1) - 1
				if j*batch >= int64(total) {
					return
				}
				for i := range buf {
					n := uint64(j)*batch + uint64(i)
					buf[i] = fresh(recs[n%uint64(len(recs))], n)
				}
				if _, err := s.AppendCalls(context.Background(), buf); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if n, _ := s.spool.usage(); n > 0 {
		b.Errorf("%d batches went to the spool: the figure is not ClickHouse's", n)
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkBytesPerCall stores 200000 generated calls of mixed traffic as
// serve would (appended, then the detector's output committed) and reports
// the bytes on disk per call from system.parts, every table included, after
// the parts are merged (OPTIMIZE ... FINAL).
//
// The generator gives every call a random trace id of its own
// (trace_per_call). An instrumented client puts the spans of one turn, or
// of a whole conversation, in one trace: trace_per_session gives every call
// of a session one trace id, the most sharing real traffic can have, so the
// two figures bound the trace id's cost. Only the trace ids differ.
func BenchmarkBytesPerCall(b *testing.B) {
	for _, v := range []struct {
		name string
		edit func(*audit.Record)
	}{{"trace_per_call", nil}, {"trace_per_session", traceBySession}} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				perCall, report := storeTraffic(b, 200000, v.edit)
				b.Log(report)
				b.ReportMetric(perCall, "B/call")
			}
		})
	}
}

// traceBySession gives a call the trace id of its session: a hash of it.
func traceBySession(r *audit.Record) {
	c := *r.Call
	sum := sha256.Sum256([]byte(c.Tenant + "\x00" + c.Server + "\x00" + c.Session))
	c.TraceID = hex.EncodeToString(sum[:16])
	r.Call = &c
}

// TestBytesPerCall guards the storage figure on a smaller sample: at most
// 125 bytes per call (122 measured on 18.16: 102 with each call's stored
// reading, about 12 bytes of it, and 19 of tamper evidence, the chain's
// 128-bit row hashes, which do not compress; the target of 80 is not met,
// docs/clickhouse.md says why).
func TestBytesPerCall(t *testing.T) {
	if testing.Short() {
		t.Skip("stores 30000 calls")
	}
	perCall, report := storeTraffic(t, 30000, nil)
	t.Log(report)
	if perCall > 125 {
		t.Errorf("%.1f bytes per call, want at most 125", perCall)
	}
}

// interleaved replays conversations side by side, as many sessions at once
// do: k generators of the same mix (one problem conversation for ten normal
// ones, as the SQLite figure), merged in time order. One generator alone
// spreads 30000 calls over two months: a day partition would hold a few
// hundred calls, and the size of every part's fixed files would count as
// much as the rows.
type interleaved struct {
	gens  []*storetest.Generator
	heads []audit.Record
}

func newInterleaved(tb testing.TB, k int) *interleaved {
	tb.Helper()
	var names []string
	normal := []string{"thegram-normal-edit.ndjson", "oddlynew-normal-edit.ndjson"}
	for range 10 {
		names = append(names, normal...)
	}
	names = append(names, storetest.CaptureNames()...)
	it := &interleaved{}
	for i := range k {
		// Offsets keep the generators out of step: calls without random
		// parts would otherwise be the same calls at the same time.
		start := storetest.T0.Add(time.Duration(i) * 7919 * time.Millisecond)
		g, err := storetest.NewGenerator(uint64(7+i), start, names...)
		if err != nil {
			tb.Fatal(err)
		}
		it.gens = append(it.gens, g)
		it.heads = append(it.heads, g.Next())
	}
	return it
}

func (it *interleaved) records(n int) []audit.Record {
	out := make([]audit.Record, 0, n)
	for range n {
		j := 0
		for i := range it.heads {
			if it.heads[i].Call.Time.Before(it.heads[j].Call.Time) {
				j = i
			}
		}
		out = append(out, it.heads[j])
		it.heads[j] = it.gens[j].Next()
	}
	return out
}

// storeTraffic stores n generated calls, each changed by edit when it is
// not nil, and returns the bytes per call on disk and a report by table and
// column.
func storeTraffic(tb testing.TB, n int, edit func(*audit.Record)) (float64, string) {
	tb.Helper()
	o := testOptions(tb)
	o.BatchAge = 200 * time.Millisecond
	s := openStore(tb, o)
	storeMixedWith(tb, s, n, edit)
	ctx := context.Background()
	conn := rawConn(tb, o.DSN)
	defer conn.Close()
	if rows, _ := rowCounts(tb, o, "calls", "id"); rows != uint64(n) {
		tb.Fatalf("%d calls stored of %d generated: the generator repeats calls", rows, n)
	}
	for _, t := range []string{"calls", "writes", "findings", "watermarks"} {
		if err := conn.Exec(ctx, "OPTIMIZE TABLE "+o.Database+"."+t+" FINAL"); err != nil {
			tb.Fatal(err)
		}
	}
	type size struct {
		name                string
		bytes, rows         uint64
		data, marks, nparts uint64
	}
	var tables, columns []size
	var total uint64
	rows, err := conn.Query(ctx, "SELECT table, sum(bytes_on_disk), sum(rows), sum(data_compressed_bytes), sum(marks_bytes), count() FROM system.parts WHERE active AND database = "+quote(o.Database)+" GROUP BY table")
	if err != nil {
		tb.Fatal(err)
	}
	for rows.Next() {
		var sz size
		if err := rows.Scan(&sz.name, &sz.bytes, &sz.rows, &sz.data, &sz.marks, &sz.nparts); err != nil {
			tb.Fatal(err)
		}
		tables = append(tables, sz)
		total += sz.bytes
	}
	rows.Close()
	rows, err = conn.Query(ctx, "SELECT concat(table, '.', name), data_compressed_bytes FROM system.columns WHERE database = "+quote(o.Database)+" ")
	if err != nil {
		tb.Fatal(err)
	}
	for rows.Next() {
		var sz size
		if err := rows.Scan(&sz.name, &sz.bytes); err != nil {
			tb.Fatal(err)
		}
		columns = append(columns, sz)
	}
	rows.Close()
	perCall := float64(total) / float64(n)
	var b strings.Builder
	fmt.Fprintf(&b, "%d calls, server %s: %.1f bytes per call on disk (system.parts, all tables)", n, s.caps.Version, perCall)
	slices.SortFunc(tables, func(x, y size) int { return cmp.Compare(y.bytes, x.bytes) })
	for _, t := range tables {
		fmt.Fprintf(&b, "\n  table %-17s %7d rows in %d parts: %6.1f B/call (data %.1f, marks %.1f)", t.name, t.rows, t.nparts,
			float64(t.bytes)/float64(n), float64(t.data)/float64(n), float64(t.marks)/float64(n))
	}
	slices.SortFunc(columns, func(x, y size) int { return cmp.Compare(y.bytes, x.bytes) })
	for _, c := range columns {
		if per := float64(c.bytes) / float64(n); per >= 0.5 {
			fmt.Fprintf(&b, "\n  column %-24s %6.1f B/call", c.name, per)
		}
	}
	return perCall, b.String()
}

// storeMixed stores n generated calls of mixed traffic in s as serve
// would: appended, then the detector's output committed.
func storeMixed(tb testing.TB, s *Store, n int) {
	tb.Helper()
	storeMixedWith(tb, s, n, nil)
}

// storeMixedWith is storeMixed with each call changed by edit when it is not
// nil, before it is stored and judged.
func storeMixedWith(tb testing.TB, s *Store, n int, edit func(*audit.Record)) {
	tb.Helper()
	g := newInterleaved(tb, 128)
	col := &storetest.Collector{}
	e := detect.NewEngine(detect.NewDefaultConfig(), col)
	ctx := context.Background()
	for done := 0; done < n; {
		recs := g.records(min(5000, n-done))
		done += len(recs)
		if edit != nil {
			for i := range recs {
				edit(&recs[i])
			}
		}
		if _, err := s.AppendCalls(ctx, recs); err != nil {
			tb.Fatal(err)
		}
		for i := range recs {
			e.Add("bench", &recs[i], time.Time{})
		}
		col.Results.Watermark = storetest.MinMark(e)
		if err := s.Commit(ctx, col.Results); err != nil {
			tb.Fatal(err)
		}
		*col = storetest.Collector{}
	}
}

// BenchmarkReportCounts stores 200,000 calls of mixed traffic, then
// measures what report.Build asks of the store for its bad events (top 10,
// clients) and its days over all of them: grouped by the server
// (BadWriteCounts, WriteCountsByRange), and paged as the report read them
// before (every bad write with its call, one WriteCounts a day), taking
// turns on the one store.
//
//	go test ./exporter/clickhouse -run '^$' -bench ReportCounts -benchtime 3x -v
func BenchmarkReportCounts(b *testing.B) {
	o := testOptions(b)
	o.BatchAge = 200 * time.Millisecond
	s := openStore(b, o)
	start := time.Now()
	storeMixed(b, s, 200_000)
	ctx := context.Background()
	first, err := s.Writes(ctx, audit.WriteQuery{Limit: 1})
	if err != nil || len(first.Writes) == 0 {
		b.Fatalf("no write stored: %v", err)
	}
	wm, _ := s.Watermark(ctx)
	day := 24 * time.Hour
	bounds := []time.Time{first.Writes[0].Time.Truncate(day)}
	for bounds[len(bounds)-1].Before(wm) {
		bounds = append(bounds, bounds[len(bounds)-1].Add(day))
	}
	q := audit.BadWriteQuery{Top: 10, Clients: true}
	counts, _ := s.WriteCounts(ctx, q.CountQuery)
	b.Logf("stored in %v: %v writes by state, %d days", time.Since(start).Round(time.Second), counts, len(bounds)-1)
	ways := map[string]func() error{
		"grouped": func() error {
			if _, err := s.BadWriteCounts(ctx, q); err != nil {
				return err
			}
			_, err := s.WriteCountsByRange(ctx, q.CountQuery, bounds)
			return err
		},
		"paged": func() error {
			if _, err := storetest.PagedBadWriteCounts(ctx, s, q); err != nil {
				return err
			}
			_, err := storetest.PagedWriteCountsByRange(ctx, s, q.CountQuery, bounds)
			return err
		},
	}
	for _, way := range []string{"paged", "grouped", "grouped", "paged", "paged", "grouped"} {
		b.Run(way, func(b *testing.B) {
			for b.Loop() {
				if err := ways[way](); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
