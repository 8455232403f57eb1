package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
	"github.com/mcpaudit/mcpaudit/internal/procstat"
)

// pool returns n generated call records to draw benchmark batches from.
func pool(tb testing.TB, n int) []audit.Record {
	tb.Helper()
	g, err := storetest.NewGenerator(1, storetest.T0)
	if err != nil {
		tb.Fatal(err)
	}
	return g.Records(n)
}

// fresh returns a copy of r with a new random id: ids are hashes in real
// traffic, and the unique index on them is written at random places.
func fresh(r audit.Record, n uint64) audit.Record {
	c := *r.Call
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], splitmix(n))
	binary.LittleEndian.PutUint64(b[8:], splitmix(n^0xabcdef))
	c.ID = "c_" + hex.EncodeToString(b[:10])
	c.Time = c.Time.Add(time.Duration(n) * time.Microsecond)
	r.Call = &c
	return r
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// BenchmarkAppendCalls measures group-committed appends: 8 goroutines
// append batches of 100 generated calls each until b.N batches are stored
// (and one goroutine batches of 512, sequential512). It reports calls/s,
// commits (transactions) per second, the mean calls per commit, and the
// median and 99th percentile of AppendCalls' latency (an acknowledgement).
//
//	go test -run '^$' -bench AppendCalls -benchtime 2000x ./exporter/sqlite/
//	go test -run '^$' -bench AppendCalls/sequential512 -benchtime 400x ./exporter/sqlite/
func BenchmarkAppendCalls(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"full", Options{}},
		{"full_delay2ms", Options{MaxDelay: 2 * time.Millisecond}},
		{"normal", Options{Synchronous: "normal"}},
	} {
		b.Run(bc.name, func(b *testing.B) { benchAppend(b, bc.opts, 8, 100) })
	}
	// One sequential client with batches of 512, as one OpenTelemetry SDK
	// exporter sends: each batch waits for the previous one's answer, so
	// its rate is one commit's latency (issue 9: >= 40,000 calls/s at an
	// acknowledgement p99 <= 50 ms).
	b.Run("sequential512", func(b *testing.B) { benchAppend(b, Options{}, 1, 512) })
	// The same with ack "log": acknowledged once synced to the call log,
	// committed behind (Close waits for the drain; the calls/s are the
	// acknowledgements').
	b.Run("full_acklog", func(b *testing.B) { benchAppend(b, Options{Ack: AckLog}, 8, 100) })
	b.Run("sequential512_acklog", func(b *testing.B) { benchAppend(b, Options{Ack: AckLog}, 1, 512) })
}

func benchAppend(b *testing.B, opts Options, workers, batch int) {
	recs := pool(b, 20000)
	var commits, committed atomic.Int64
	opts.OnCommit = func(_ time.Duration, calls int) {
		commits.Add(1)
		committed.Add(int64(calls))
	}
	s := openTemp(b, opts)
	defer s.Close()
	var next atomic.Int64
	var wg sync.WaitGroup
	lat := make([]time.Duration, b.N) // of each AppendCalls, by batch
	cpu0, io0 := procstat.CPU(), procstat.Written()
	b.ResetTimer()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]audit.Record, batch)
			for {
				j := next.Add(1) - 1
				if j >= int64(b.N) {
					return
				}
				for i := range buf {
					n := uint64(j)*uint64(batch) + uint64(i)
					buf[i] = fresh(recs[n%uint64(len(recs))], n)
				}
				start := time.Now()
				if _, err := s.AppendCalls(context.Background(), buf); err != nil {
					b.Error(err)
					return
				}
				lat[j] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	calls := float64(b.N * batch)
	// On a shared machine the rate follows the neighbours' load; the CPU
	// and the bytes written per call do not.
	b.ReportMetric(float64(procstat.CPU()-cpu0)/1e3/calls, "cpu-µs/call")
	b.ReportMetric(float64(procstat.Written()-io0)/calls, "written-B/call")
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N*batch)/sec, "calls/s")
	b.ReportMetric(float64(commits.Load())/sec, "commits/s")
	b.ReportMetric(float64(committed.Load())/float64(max(commits.Load(), 1)), "calls/commit")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "ack-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "ack-p99-ms")
}

// Traffic mixes for size measurements: the captures a generator replays.
var (
	// normalTraffic is reads and successful edits only.
	normalTraffic = []string{"thegram-normal-edit.ndjson", "oddlynew-normal-edit.ndjson"}
	// problemTraffic is every capture once: each shows a problem, so that
	// about one call in five gives a finding.
	problemTraffic = storetest.CaptureNames()
)

// mixedTraffic is one problem conversation for ten normal ones.
func mixedTraffic() []string {
	var names []string
	for range 10 {
		names = append(names, normalTraffic...)
	}
	for i, name := range problemTraffic {
		names = append(names, name)
		if i%2 == 1 {
			names = append(names, normalTraffic...)
		}
	}
	return names
}

// traffic is what storeTraffic stored.
type traffic struct {
	calls, writes, findings int
	perCall                 float64          // file bytes per call
	tables                  map[string]int64 // bytes by table and index
	// written and cpu are the bytes the process wrote and its CPU time
	// while storing, appends, detection and commits of writes and
	// findings together, per call.
	written, cpu float64
}

// storeTraffic stores n generated calls as serve would: each batch appended,
// then the detector's output committed with its watermark. It measures the
// file after Close, which checkpoints the log into it. source, when given,
// names the source of the i-th call (else it is the capture's file:line).
func storeTraffic(tb testing.TB, n int, captures []string, source ...func(i int) string) traffic {
	tb.Helper()
	g, err := storetest.NewGenerator(7, storetest.T0, captures...)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	col := &storetest.Collector{}
	e := detect.NewEngine(detect.NewDefaultConfig(), col)
	ctx := context.Background()
	cpu0, io0 := procstat.CPU(), procstat.Written()
	for done := 0; done < n; {
		recs := g.Records(min(500, n-done))
		for _, f := range source {
			for i := range recs {
				recs[i].Call.Source = f(done + i)
			}
		}
		done += len(recs)
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
	tr := traffic{calls: n, tables: map[string]int64{},
		written: float64(procstat.Written()-io0) / float64(n), cpu: float64(procstat.CPU()-cpu0) / 1e3 / float64(n)}
	counts, err := s.WriteCounts(ctx, audit.CountQuery{})
	if err != nil {
		tb.Fatal(err)
	}
	for _, c := range counts {
		tr.writes += int(c)
	}
	ids, err := s.FindingIDs(ctx, time.Time{})
	if err != nil {
		tb.Fatal(err)
	}
	tr.findings = len(ids)
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	// The id index beside the file counts too (as closed: its log holds
	// what it had not flushed).
	var idx int64
	if err := filepath.WalkDir(IDIndexDir(path), func(_ string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		info, err := e.Info()
		if err == nil {
			idx += info.Size()
		}
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	tr.perCall = float64(st.Size()+idx) / float64(n)

	db, err := sql.Open("sqlite", path)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name || ' (' || sum(pagetype = 'internal') || ' interior, ' || (100 * sum(unused) / sum(pgsize)) || '% free)', sum(pgsize) FROM dbstat GROUP BY name`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var size int64
		if err := rows.Scan(&name, &size); err != nil {
			tb.Fatal(err)
		}
		tr.tables[name] = size
	}
	tr.tables["(call id index, "+filepath.Base(IDIndexDir(path))+"/)"] = idx
	return tr
}

func (tr traffic) log(tb testing.TB) {
	tb.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%d calls, %.2f writes and %.3f findings per call: %.0f bytes per call", tr.calls,
		float64(tr.writes)/float64(tr.calls), float64(tr.findings)/float64(tr.calls), tr.perCall)
	names := slices.Collect(maps.Keys(tr.tables))
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(tr.tables[b], tr.tables[a]) })
	for _, name := range names {
		if per := float64(tr.tables[name]) / float64(tr.calls); per >= 0.5 {
			fmt.Fprintf(&b, "\n  %-52s %6.1f B/call", name, per)
		}
	}
	tb.Log(b.String())
}

// BenchmarkBytesPerCall reports the file size per stored call, writes and
// findings of the same traffic included, for three mixes of traffic; and
// the bytes written and the CPU time per call while storing them as serve
// does (appends, then the detector's writes and findings committed), which
// the append benchmarks leave out.
//
//	go test -run '^$' -bench BytesPerCall -benchtime 1x -v ./exporter/sqlite/
func BenchmarkBytesPerCall(b *testing.B) {
	const n = 200000
	for _, mix := range []struct {
		name     string
		captures []string
	}{{"normal", normalTraffic}, {"mixed", mixedTraffic()}, {"problems", problemTraffic}} {
		b.Run(mix.name, func(b *testing.B) {
			var tr traffic
			for range b.N {
				tr = storeTraffic(b, n, mix.captures)
			}
			tr.log(b)
			b.ReportMetric(tr.perCall, "B/call")
			b.ReportMetric(float64(tr.writes)/n, "writes/call")
			b.ReportMetric(float64(tr.findings)/n, "findings/call")
			b.ReportMetric(tr.written, "written-B/call")
			b.ReportMetric(tr.cpu, "cpu-µs/call")
		})
	}
}

// TestBytesPerCall guards the storage figure: at most 320 bytes per stored
// call of typical traffic (reads and successful edits), its writes
// included. Each call keeps its dialect's reading beside it since the
// reading travels from ingest to the detector (about 24 bytes compressed),
// and the investigation page's session index costs about 7.5 bytes (300
// before both); the target of docs/benchmarks.md is lower, and not met by
// this store. The tamper-evidence chain (one entry per commit and tenant)
// and the tenant in the call key cost about 2 bytes more (324). Deduping
// calls by (millisecond, tenant, id) instead of (id, tenant), which keeps
// the random id out of SQLite's commits, costs 9 bytes more in SQLite, and
// the id index beside the file (audit.db.ids/, counted here) about 19
// (350). Moving the document index into it and dropping writes' second key
// (schema 5) saves about 4 (353 on 200,000 calls). The session entries of
// the index (format 2: a 25-byte key per call with a session) cost about
// 10 bytes on 200,000 calls and 19 on a million once compacted; on these
// 30,000 calls, whose index is still mostly pebble's log, 37 (332 before,
// 369 after): 375. The mixed traffic, with a finding every twenty calls,
// is logged.
func TestBytesPerCall(t *testing.T) {
	if testing.Short() {
		t.Skip("stores 60000 calls")
	}
	tr := storeTraffic(t, 30000, normalTraffic)
	tr.log(t)
	if tr.perCall > 375 {
		t.Errorf("%.0f bytes per call, want at most 375", tr.perCall)
	}
	storeTraffic(t, 30000, mixedTraffic()).log(t)
}

// TestBytesPerCallSender measures what a call's source costs stored, as
// serve names it: since 2026-12-05 the sender ("otlp:thegram/pod-b/node-2",
// one name for every call of a sender), before its place in the request
// (a span's path, a record's line). The sender of OTLP spans must cost no
// more than their place did.
func TestBytesPerCallSender(t *testing.T) {
	if testing.Short() {
		t.Skip("stores 5 × 10000 calls")
	}
	const n = 10000
	per := map[string]float64{}
	for _, s := range []struct {
		name   string
		source func(i int) string
	}{
		{"none", func(int) string { return "" }},
		{"span place (before)", func(i int) string {
			return fmt.Sprintf("otlp_grpc:resourceSpans[0].scopeSpans[0].spans[%d]", i%100)
		}},
		{"record line (before)", func(i int) string { return fmt.Sprintf("body:%d", i%500+1) }},
		{"OTLP sender", func(int) string { return "otlp:thegram/pod-b/node-2" }},
		{"poster sender", func(int) string { return "calls:proxy/thegram/host:8080" }},
	} {
		per[s.name] = storeTraffic(t, n, normalTraffic, s.source).perCall
		t.Logf("%-22s %6.1f bytes per call (%+.1f against none)", s.name, per[s.name], per[s.name]-per["none"])
	}
	if per["OTLP sender"] > per["span place (before)"] {
		t.Errorf("an OTLP sender costs %.1f bytes per call, more than the span's place did (%.1f)", per["OTLP sender"], per["span place (before)"])
	}
}
