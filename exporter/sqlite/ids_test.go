package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// The store's count of failed index writes is what serve exports.
var _ metrics.IDIndexFaulter = (*Store)(nil)

// TestCallsKey checks that calls_key's first column is the millisecond a
// stable id hashes (time.Round, halves up), computed by SQLite as by Go,
// before 1970 too, so that two copies of one call meet in the index.
func TestCallsKey(t *testing.T) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f := func(n int64) {
		t.Helper()
		var got int64
		if err := db.QueryRow(`SELECT `+callsKey+` FROM (SELECT ? AS time)`, n).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != roundedMilli(n) {
			t.Errorf("SQLite's key of %d = %d, Go's %d", n, got, roundedMilli(n))
		}
		if n == zeroTime {
			return
		}
		if want := time.Unix(0, n).Round(time.Millisecond).UnixMilli(); got != want {
			t.Errorf("key of %d = %d, want the id's millisecond %d", n, got, want)
		}
	}
	for _, n := range []int64{0, 1, 499999, 500000, 500001, 999999, 1000000, 1499999, 1500000,
		-1, -499999, -500000, -500001, -999999, -1000000, -1500000, -1500001,
		1764633600123456789, 1764633600123500000, 1764633600123499999, -1764633600123500000,
		math.MaxInt64, math.MinInt64 + 1} {
		f(n)
	}
	// The zero time (a call without one) is stored as math.MinInt64: it
	// shares the earliest storable time's key (1677), which no traffic has.
	f(zeroTime)
}

// TestCallsKey_Dedupes: a call sent again is ignored, with its time as
// stored (the same nanosecond); copies under other tenants are kept.
func TestCallsKey_Dedupes(t *testing.T) {
	s := openTemp(t, Options{})
	defer s.Close()
	ctx := context.Background()
	recs := records(t, 20)
	recs[3].Call.Time = time.Time{} // a call without a time
	if n, err := s.AppendCalls(ctx, recs); err != nil || n != 20 {
		t.Fatalf("AppendCalls = %d, %v", n, err)
	}
	if n, err := s.AppendCalls(ctx, recs); err != nil || n != 0 {
		t.Fatalf("AppendCalls again = %d, %v; want 0", n, err)
	}
	other := withTenant(recs[:5], "acme")
	if n, err := s.AppendCalls(ctx, other); err != nil || n != 5 {
		t.Fatalf("AppendCalls of another tenant = %d, %v; want 5", n, err)
	}
	if got := count(t, s); got != 25 {
		t.Fatalf("%d calls stored, want 25", got)
	}
}

func withTenant(recs []audit.Record, tenant string) []audit.Record {
	out := make([]audit.Record, len(recs))
	for i, r := range recs {
		c := *r.Call
		c.Tenant = tenant
		r.Call = &c
		out[i] = r
	}
	return out
}

func ids(recs []audit.Record) []string {
	out := make([]string, len(recs))
	for i := range recs {
		out[i] = recs[i].Call.ID
	}
	return out
}

// lookupIDs returns "tenant/id" of every call Calls finds by the ids.
func lookupIDs(t *testing.T, s *Store, ids []string) []string {
	t.Helper()
	p, err := s.Calls(context.Background(), audit.CallQuery{IDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range p.Calls {
		out = append(out, r.Call.Tenant+"/"+r.Call.ID)
	}
	slices.Sort(out)
	return out
}

func keysOf(recs []audit.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Call.Tenant+"/"+r.Call.ID)
	}
	slices.Sort(out)
	return out
}

// indexedKeys counts the id index's entries (its own keys not included).
func indexedKeys(t *testing.T, s *Store) int {
	t.Helper()
	it, err := s.ids.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if k := it.Key()[0]; k == idKindBlob || k == idKindText {
			n++
		}
	}
	return n
}

// checkDocIndex checks that the document entries of s's index are exactly
// those of the calls stored: one per call and hash of a document it
// touched, at its time and rid.
func checkDocIndex(t *testing.T, s *Store) {
	t.Helper()
	rows, err := s.r.Query(`SELECT rid, time, rec FROM calls`)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for rows.Next() {
		var rid, tm int64
		var blob []byte
		if err := rows.Scan(&rid, &tm, &blob); err != nil {
			t.Fatal(err)
		}
		docs, _ := recordDocs(nil, blob)
		for _, dh := range docs {
			want = append(want, fmt.Sprintf("%d/%d/%d", dh, tm, rid))
		}
	}
	rows.Close()
	it, err := s.ids.db.NewIter(&pebble.IterOptions{LowerBound: []byte{docKind}, UpperBound: []byte{docKind + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		tm, rid, ok := parseDocKey(it.Key())
		if !ok {
			t.Fatalf("bad document key %x", it.Key())
		}
		got = append(got, fmt.Sprintf("%d/%d/%d", int32(binary.BigEndian.Uint32(it.Key()[1:5])), tm, rid))
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) == 0 {
		t.Fatal("no call has a document: the check checks nothing")
	}
	if !slices.Equal(got, want) {
		t.Errorf("document entries:\n %v\nwant those of the stored calls:\n %v", got, want)
	}
}

// TestIDIndex_LookupAfterAppend: every tenant's copy is found by id as soon
// as its append returned, through the index (the mark covers it).
func TestIDIndex_LookupAfterAppend(t *testing.T) {
	s := openTemp(t, Options{})
	defer s.Close()
	ctx := context.Background()
	recs := records(t, 50)
	both := append(slices.Clone(recs), withTenant(recs[:10], "acme")...)
	for i := 0; i < len(both); i += 7 {
		batch := both[i:min(i+7, len(both))]
		if _, err := s.AppendCalls(ctx, batch); err != nil {
			t.Fatal(err)
		}
		// Every copy stored so far of the batch's ids.
		var want []audit.Record
		for _, r := range both[:i+len(batch)] {
			if slices.Contains(ids(batch), r.Call.ID) {
				want = append(want, r)
			}
		}
		if got := lookupIDs(t, s, ids(batch)); !slices.Equal(got, keysOf(want)) {
			t.Fatalf("after appending calls %d..: found %v, want %v", i, got, keysOf(want))
		}
	}
	if got := indexedKeys(t, s); got != 60 {
		t.Errorf("index holds %d entries, want 60", got)
	}
	if mark, seq := s.ids.mark.Load(), maxRID(t, s); mark != seq {
		t.Errorf("index marked through rid %d, calls stored through %d", mark, seq)
	}
	if got := lookupIDs(t, s, []string{"c_00000000000000000000", "not-an-id"}); len(got) != 0 {
		t.Errorf("unknown ids found %v", got)
	}
}

func maxRID(t *testing.T, s *Store) int64 {
	t.Helper()
	var seq int64
	if err := s.w.QueryRow(`SELECT seq FROM sqlite_sequence WHERE name = 'calls'`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	return seq
}

// TestIDIndex_RebuiltWhenMissing: a store opened without its index
// directory builds it again from the calls.
func TestIDIndex_RebuiltWhenMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs := records(t, 100)
	if _, err := s.AppendCalls(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(IDIndexDir(path)); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := indexedKeys(t, s); got != 100 {
		t.Fatalf("rebuilt index holds %d entries, want 100", got)
	}
	checkDocIndex(t, s)
	if mark := s.ids.mark.Load(); mark != 100 {
		t.Fatalf("rebuilt index marked through %d, want 100", mark)
	}
	if got := lookupIDs(t, s, ids(recs)); !slices.Equal(got, keysOf(recs)) {
		t.Fatalf("found %d of 100 calls after the rebuild", len(got))
	}

	// So is an index of another epoch (another file's, or a damaged one).
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE meta SET value = 'other' WHERE key = ?`, idsEpochMeta); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := os.WriteFile(filepath.Join(IDIndexDir(path), "MANIFEST-000001"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("Open with a damaged index: %v", err)
	}
	if got := lookupIDs(t, s, ids(recs)); !slices.Equal(got, keysOf(recs)) {
		t.Fatalf("found %d of 100 calls after the second rebuild", len(got))
	}
}

// TestIDIndex_RestoredOlderFile: the index of a newer copy of the file
// beside an older one restored (its marks beyond the file's last rid) is
// rebuilt, so that the calls the restored file gives the same rids are
// found.
func TestIDIndex_RestoredOlderFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	recs := records(t, 300)
	if _, err := s.AppendCalls(ctx, recs[:100]); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	backup, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCalls(ctx, recs[100:200]); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, backup, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if mark := s.ids.mark.Load(); mark != 100 {
		t.Fatalf("index over the restored file marked through %d, want 100", mark)
	}
	// Other calls get rids 101..200 again.
	if _, err := s.AppendCalls(ctx, recs[200:]); err != nil {
		t.Fatal(err)
	}
	want := keysOf(append(slices.Clone(recs[:100]), recs[200:]...))
	if got := lookupIDs(t, s, ids(recs)); !slices.Equal(got, want) {
		t.Fatalf("found %d calls by id after the restore, want %d", len(got), len(want))
	}
}

// checkFaults checks what reg exports of the store's faults: the failed
// index writes, the corrupt blocks met, and nothing else.
func checkFaults(t *testing.T, reg prometheus.Gatherer, idIndexWrite, idIndexCorrupt int) {
	t.Helper()
	want := fmt.Sprintf(`# HELP %[1]s %[2]s
# TYPE %[1]s counter
%[1]s{%[3]s="%[4]s"} %[5]d
%[1]s{%[3]s="%[6]s"} %[7]d
`, metrics.StoreFaultsTotal, storeFaultsHelp(t), metrics.LabelFault, metrics.FaultIDIndexWrite, idIndexWrite, metrics.FaultIDIndexCorrupt, idIndexCorrupt)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.StoreFaultsTotal); err != nil {
		t.Error(err)
	}
}

func storeFaultsHelp(t *testing.T) string {
	for _, f := range metrics.Families {
		if f.Name == metrics.StoreFaultsTotal {
			return f.Help
		}
	}
	t.Fatalf("no family %s", metrics.StoreFaultsTotal)
	return ""
}

// TestIDIndex_FailedWrite: a failed index write neither fails the append
// nor hides its calls (found past the mark); the committer catches up at
// its next try, and Open at the latest.
func TestIDIndex_FailedWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Exported as serve does, at zero from the start.
	reg := prometheus.NewPedanticRegistry()
	if err := metrics.WatchStore(reg, s); err != nil {
		t.Fatal(err)
	}
	checkFaults(t, reg, 0, 0)
	ctx := context.Background()
	recs := records(t, 120)
	if _, err := s.AppendCalls(ctx, recs[:40]); err != nil {
		t.Fatal(err)
	}
	checkFaults(t, reg, 0, 0)
	s.ids.fault = func() error { return errors.New("disk full") }
	if n, err := s.AppendCalls(ctx, recs[40:80]); err != nil || n != 40 {
		t.Fatalf("AppendCalls with the index failing = %d, %v; want 40 stored", n, err)
	}
	if got := s.IDIndexFailures(); got != 1 {
		t.Errorf("IDIndexFailures = %d, want 1", got)
	}
	checkFaults(t, reg, 1, 0)
	if mark := s.ids.mark.Load(); mark != 40 {
		t.Fatalf("mark moved to %d past a failed write, want 40", mark)
	}
	if got := lookupIDs(t, s, ids(recs[:80])); !slices.Equal(got, keysOf(recs[:80])) {
		t.Fatalf("found %d of 80 calls with the index behind", len(got))
	}
	// The write works again, but the committer waits before it retries:
	// the calls stay found past the mark.
	s.ids.fault = nil
	if _, err := s.AppendCalls(ctx, recs[80:100]); err != nil {
		t.Fatal(err)
	}
	if mark := s.ids.mark.Load(); mark != 40 {
		t.Fatalf("mark moved to %d before the index caught up, want 40", mark)
	}
	if got := lookupIDs(t, s, ids(recs[:100])); !slices.Equal(got, keysOf(recs[:100])) {
		t.Fatalf("found %d of 100 calls with the index behind", len(got))
	}
	// At its next try it catches up with every call past the mark.
	s.ids.retryEvery = 0
	if _, err := s.AppendCalls(ctx, recs[100:110]); err != nil {
		t.Fatal(err)
	}
	if mark := s.ids.mark.Load(); mark != 110 {
		t.Fatalf("mark %d after the catch-up, want 110", mark)
	}
	if got := indexedKeys(t, s); got != 110 {
		t.Fatalf("index holds %d entries after the catch-up, want 110", got)
	}
	checkDocIndex(t, s)
	// A failure left behind at close is caught up at open.
	s.ids.fault = func() error { return errors.New("disk full") }
	if _, err := s.AppendCalls(ctx, recs[110:]); err != nil {
		t.Fatal(err)
	}
	s.ids.fault = nil
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if mark := s.ids.mark.Load(); mark != 120 {
		t.Fatalf("mark %d after reopening, want 120", mark)
	}
	if got := lookupIDs(t, s, ids(recs)); !slices.Equal(got, keysOf(recs)) {
		t.Fatalf("found %d of 120 calls after reopening", len(got))
	}
}

// TestIDIndex_Retention: deleted calls leave the index, and an entry left
// behind (a failed delete) finds nothing.
// TestIDIndex_BatchReleased checks that a batch the index wrote goes back
// to pebble, reset, for the next write to reuse its buffer (a new one grew
// by doubling to a commit's size each time), and that its entries stay
// written; a failed write's batch is not reused.
func TestIDIndex_BatchReleased(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "audit.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := func(i int) []byte { return fmt.Appendf(nil, "zz-test-%03d", i) }
	b := s.ids.db.NewBatch()
	for i := range 100 {
		b.Set(key(i), []byte{1}, nil)
	}
	if err := s.ids.commit(b); err != nil {
		t.Fatal(err)
	}
	if n := b.Count(); n != 0 {
		t.Errorf("batch holds %d entries after its write, want 0 (released to pebble)", n)
	}
	for i := range 100 {
		if _, closer, err := s.ids.db.Get(key(i)); err != nil {
			t.Fatalf("entry %d of the released batch: %v", i, err)
		} else {
			closer.Close()
		}
	}
	s.ids.fault = func() error { return errors.New("disk full") }
	b = s.ids.db.NewBatch()
	b.Set(key(100), []byte{1}, nil)
	if err := s.ids.commit(b); err == nil {
		t.Fatal("write with a fault succeeded")
	}
	s.ids.fault = nil
	if _, _, err := s.ids.db.Get(key(100)); !errors.Is(err, pebble.ErrNotFound) {
		t.Errorf("entry of the failed write: %v, want not found", err)
	}
}

func TestIDIndex_Retention(t *testing.T) {
	s := openTemp(t, Options{DeleteChunk: 7})
	defer s.Close()
	ctx := context.Background()
	recs := records(t, 60)
	slices.SortFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	acme := withTenant(recs[:20], "acme")
	if _, err := s.AppendCalls(ctx, append(slices.Clone(recs), acme...)); err != nil {
		t.Fatal(err)
	}
	cut := recs[30].Call.Time
	// A stale entry: the first call's id names the rid of the last one.
	stale := idKey(nil, packID(callPrefix, recs[0].Call.ID), 99)
	if err := s.ids.db.Set(stale, []byte{60}, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteTenantBefore(ctx, "acme", cut); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteBefore(ctx, cut, "acme"); err != nil {
		t.Fatal(err)
	}
	if got := indexedKeys(t, s); got != 30+1 {
		t.Errorf("index holds %d entries after retention, want 30 and the stale one", got)
	}
	checkDocIndex(t, s)
	if got, want := lookupIDs(t, s, ids(recs)), keysOf(recs[30:]); !slices.Equal(got, want) {
		t.Fatalf("after retention found %v, want %v", got, want)
	}
	if got := lookupIDs(t, s, ids(recs[:1])); len(got) != 0 {
		t.Fatalf("a deleted call's id found %v through a stale entry", got)
	}
}

// TestIDIndex_RestoredBeforeRetention: an older copy of the file restored
// beside an index that retention deleted its calls from since (no call
// appended: the mark is not past the file) is rebuilt, so that the calls
// the file still holds are found.
func TestIDIndex_RestoredBeforeRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	recs := records(t, 100)
	slices.SortFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	if _, err := s.AppendCalls(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	backup, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteBefore(ctx, recs[50].Call.Time); err != nil || n < 50 {
		t.Fatalf("DeleteBefore = %d, %v", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, backup, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := lookupIDs(t, s, ids(recs)); !slices.Equal(got, keysOf(recs)) {
		t.Fatalf("found %d of the restored file's 100 calls by id", len(got))
	}
}

// BenchmarkIDIndexRebuild measures Open rebuilding the id index of a store
// of 200,000 calls whose index directory was removed (a backup restored
// without it, or a damaged one).
//
//	go test -run '^$' -bench IDIndexRebuild -benchtime 3x ./exporter/sqlite/
func BenchmarkIDIndexRebuild(b *testing.B) {
	const n = 200000
	path := filepath.Join(b.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	recs := pool(b, 20000)
	buf := make([]audit.Record, 2000)
	for j := 0; j < n/len(buf); j++ {
		for i := range buf {
			k := uint64(j*len(buf) + i)
			buf[i] = fresh(recs[k%uint64(len(recs))], k)
		}
		if _, err := s.AppendCalls(context.Background(), buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if err := os.RemoveAll(IDIndexDir(path)); err != nil {
			b.Fatal(err)
		}
		s, err := Open(path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if got := s.ids.mark.Load(); got != n {
			b.Fatalf("rebuilt through rid %d, want %d", got, n)
		}
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n*1e6/1e9, "s/Mcalls")
}

// TestIDIndex_TwoStores: a second store on the same file (a command beside
// serve) finds the index held and looks calls up by scanning; the calls it
// appends are found by the first, and indexed by its next commit.
func TestIDIndex_TwoStores(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	a, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	recs := records(t, 90)
	if _, err := a.AppendCalls(ctx, recs[:30]); err != nil {
		t.Fatal(err)
	}
	b, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("a second store on the file: %v", err)
	}
	if b.ids != nil {
		t.Fatal("the second store opened the index the first holds")
	}
	if got := lookupIDs(t, b, ids(recs[:30])); !slices.Equal(got, keysOf(recs[:30])) {
		t.Fatalf("the second store found %d of 30 calls by id", len(got))
	}
	if _, err := b.AppendCalls(ctx, recs[30:60]); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := lookupIDs(t, a, ids(recs[:60])); !slices.Equal(got, keysOf(recs[:60])) {
		t.Fatalf("the first store found %d of 60 calls by id", len(got))
	}
	if _, err := a.AppendCalls(ctx, recs[60:]); err != nil {
		t.Fatal(err)
	}
	if got := indexedKeys(t, a); got != 90 {
		t.Fatalf("index holds %d entries, want 90 (the other store's calls too)", got)
	}
	checkDocIndex(t, a)
	if mark := a.ids.mark.Load(); mark != 90 {
		t.Fatalf("index marked through %d, want 90", mark)
	}
}

// TestIDIndex_WaitForHolder: a store opened with IDIndexWait (serve) while
// a command holds the index waits for it, and takes it once the command
// closes, instead of scanning for its whole life; one that waited in vain
// opens without it.
func TestIDIndex_WaitForHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	cmd, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs := records(t, 40)
	if _, err := cmd.AppendCalls(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	// In vain: the command still holds it.
	short, err := Open(path, Options{IDIndexWait: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if short.ids != nil {
		t.Error("a store opened the index the command holds")
	}
	short.Close()
	type opened struct {
		s   *Store
		err error
	}
	done := make(chan opened, 1)
	go func() {
		s, err := Open(path, Options{IDIndexWait: 20 * time.Second})
		done <- opened{s, err}
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case o := <-done:
		t.Fatalf("Open returned while the command held the index: %v", o.err)
	default:
	}
	if err := cmd.Close(); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	defer o.s.Close()
	if o.s.ids == nil {
		t.Fatal("the waiting store opened without the index the command let go")
	}
	if got := lookupIDs(t, o.s, ids(recs)); !slices.Equal(got, keysOf(recs)) {
		t.Fatalf("found %d of 40 calls by id", len(got))
	}
}

// TestIDIndex_CorruptBlock: a damaged block in the index (bit rot, a bad
// copy) is met by a lookup; pebble's default would exit the process (at
// every start, until the directory is deleted). The store counts it and
// finds the calls by scanning them instead.
func TestIDIndex_CorruptBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs := records(t, 2000)
	if _, err := s.AppendCalls(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	// Into a table: a flush writes the memtable out as one.
	if err := s.ids.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	tables, err := filepath.Glob(filepath.Join(IDIndexDir(path), "*.sst"))
	if err != nil || len(tables) == 0 {
		t.Fatalf("no table in the index: %v %v", tables, err)
	}
	// The largest table only, which holds the calls' entries: the build
	// flushes its epoch into a small table of its own (the index has no
	// log), and a corrupt epoch is not met by lookups but by the open,
	// which rebuilds the index.
	largest, size := "", int64(0)
	for _, name := range tables {
		if fi, err := os.Stat(name); err == nil && fi.Size() > size {
			largest, size = name, fi.Size()
		}
	}
	for _, name := range []string{largest} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i := len(b) / 8; i < len(b)/2; i++ {
			b[i] ^= 0xff // data blocks, not the footer: the table still opens
		}
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("Open with a corrupt block: %v", err)
	}
	defer s.Close()
	if got := lookupIDs(t, s, ids(recs)); !slices.Equal(got, keysOf(recs)) {
		t.Fatalf("found %d of %d calls with a corrupt index", len(got), len(recs))
	}
	// Counted as a corruption, which needs a person to delete the index,
	// not as a failed write, which catches up by itself.
	reg := prometheus.NewPedanticRegistry()
	if err := metrics.WatchStore(reg, s); err != nil {
		t.Fatal(err)
	}
	if n := s.IDIndexCorruptions(); n == 0 {
		t.Error("the corruption was not counted")
	} else {
		checkFaults(t, reg, 0, int(n))
	}
}

// roundedMilli is callsKey in Go, for tests.
func roundedMilli(n int64) int64 {
	q, r := n/1e6, n%1e6
	if r >= 500000 {
		q++
	}
	if r < -500000 {
		q--
	}
	return q
}
