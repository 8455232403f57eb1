package calllogs_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
	"github.com/mcpaudit/mcpaudit/internal/tmpfs"
)

// open opens a store in a new directory with its calls in call logs of
// opts, the real files on disk.
func open(t *testing.T, dir string, opts calllog.Options) *sqlite.Store {
	t.Helper()
	logs, err := calllogs.Open(calllogs.Dir(dir), opts)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(filepath.Join(dir, "audit.db"), sqlite.Options{Calls: sqlite.CallsLog, CallLog: logs})
	if err != nil {
		logs.Close()
		t.Fatal(err)
	}
	return st
}

// TestConformance_CallsInLog runs the conformance suite against the store
// with its calls in the call logs.
func TestConformance_CallsInLog(t *testing.T) {
	storetest.Run(t, func(t *testing.T) audit.Store { return open(t, t.TempDir(), calllog.Options{}) })
}

// TestOpen_RefusesCallsInTable: a store whose calls table holds calls is
// not opened with calls: log (the two sources are not merged).
func TestOpen_RefusesCallsInTable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.db")
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs := gen(t, 1).Records(10)
	if _, err := st.AppendCalls(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	logs, err := calllogs.Open(calllogs.Dir(dir), calllog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	st, err = sqlite.Open(path, sqlite.Options{Calls: sqlite.CallsLog, CallLog: logs})
	if !errors.Is(err, sqlite.ErrCallsInTable) {
		if err == nil {
			st.Close()
		}
		t.Fatalf("open with calls: log on a calls table of 10 calls: %v, want ErrCallsInTable", err)
	}
}

// TestNewest finds the latest call across tenants.
func TestNewest(t *testing.T) {
	dir := t.TempDir()
	logs, err := calllogs.Open(calllogs.Dir(dir), calllog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	ctx := context.Background()
	if n, err := logs.Newest(ctx); err != nil || !n.IsZero() {
		t.Fatalf("Newest of no call = %v, %v; want zero", n, err)
	}
	recs := gen(t, 2).Records(50)
	var want time.Time
	for i := range recs {
		c := *recs[i].Call
		c.Tenant = []string{"", "acme", "b"}[i%3]
		recs[i].Call = &c
		if c.Time.After(want) {
			want = c.Time
		}
	}
	if _, err := logs.Append(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if n, err := logs.Newest(ctx); err != nil || !n.Equal(want) {
		t.Fatalf("Newest = %v, %v; want %v", n, err, want)
	}
	// Retention's cut past every call of the tenant of the latest: its
	// calls stay in its live segment, and are not counted.
	var newest string
	var next time.Time
	for _, r := range recs {
		if r.Call.Time.Equal(want) {
			newest = r.Call.Tenant
		}
	}
	for _, r := range recs {
		if r.Call.Tenant != newest && r.Call.Time.After(next) {
			next = r.Call.Time
		}
	}
	if _, err := logs.DeleteBefore(want.Add(time.Nanosecond), newest, true, nil); err != nil {
		t.Fatal(err)
	}
	if n, err := logs.Newest(ctx); err != nil || !n.Equal(next) {
		t.Fatalf("Newest, tenant %q cut past its calls = %v, %v; want %v (another tenant's latest)", newest, n, err, next)
	}
}

func gen(t testing.TB, seed uint64) *storetest.Generator {
	t.Helper()
	g, err := storetest.NewGenerator(seed, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestDeleteBefore_CutKeptAcrossOpen: the calls retention deleted stay
// out of reads after the logs are opened again (the cuts file), though
// their live segment still holds them; another tenant's are kept.
func TestDeleteBefore_CutKeptAcrossOpen(t *testing.T) {
	dir := calllogs.Dir(t.TempDir())
	ctx := context.Background()
	recs := gen(t, 3).Records(60)
	for i := range recs {
		c := *recs[i].Call
		c.Tenant = []string{"", "acme"}[i%2]
		recs[i].Call = &c
	}
	slices.SortFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	cut := recs[30].Call.Time
	want := map[string]int{}
	for _, r := range recs {
		if r.Call.Tenant == "acme" || !r.Call.Time.Before(cut) {
			want[r.Call.Tenant+"/"+r.Call.ID]++
		}
	}
	logs, err := calllogs.Open(dir, calllog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := logs.Append(ctx, recs); err != nil {
		t.Fatal(err)
	}
	n, err := logs.DeleteBefore(cut, "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if int(n) != len(recs)-len(want) {
		t.Errorf("DeleteBefore = %d calls, want %d", n, len(recs)-len(want))
	}
	if n, err := logs.DeleteBefore(cut, "", true, nil); err != nil || n != 0 {
		t.Errorf("DeleteBefore again = %d, %v; want 0 (deleted already)", n, err)
	}
	if err := logs.Close(); err != nil {
		t.Fatal(err)
	}
	logs, err = calllogs.Open(dir, calllog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	got := map[string]int{}
	if err := logs.Scan(ctx, sqlite.CallScan{}, func(r *audit.Record) error {
		got[r.Call.Tenant+"/"+r.Call.ID]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Errorf("after reopening: %d calls read, want %d (the cut tenant's from %v on, all of acme's)", len(got), len(want), cut)
	}
	for _, r := range recs[:30] {
		if r.Call.Tenant != "" {
			continue
		}
		if got, err := logs.Get(ctx, r.Call.ID, time.Time{}); err != nil || len(got) != 0 {
			t.Errorf("Get(%s), cut: %d calls, %v; want none", r.Call.ID, len(got), err)
		}
	}
}

// TestAnswerCompletes_KeptAcrossOpen: an answer the engine took completes
// its logged call in reads after the store is opened again
// (calls_completed is read at open).
func TestAnswerCompletes_KeptAcrossOpen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	var answered audit.Record
	for _, r := range gen(t, 4).Records(200) {
		if r.Call.Responded {
			answered = r
			break
		}
	}
	if answered.Call == nil {
		t.Fatal("the generator gave no answered call")
	}
	c := *answered.Call
	unanswered := answered
	unanswered.Call = &c
	c.Responded, c.Result, c.TransportError = false, nil, "timeout"
	unanswered.Outcome = audit.OutcomeNoResponse
	st := open(t, dir, calllog.Options{})
	if _, _, _, _, err := st.AppendCallsAnswered(ctx, []audit.Record{unanswered}); err != nil {
		t.Fatal(err)
	}
	if _, held, _, ans, err := st.AppendCallsAnswered(ctx, []audit.Record{answered}); err != nil || len(held) != 1 || len(ans) != 1 {
		t.Fatalf("the answer sent after the call: held %v, answered %v, %v; want [0] [0]", held, ans, err)
	}
	if err := st.Commit(ctx, audit.Results{Answered: []audit.CallRef{{Tenant: c.Tenant, ID: c.ID, Time: c.Time}}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = open(t, dir, calllog.Options{})
	defer st.Close()
	var got []*audit.Record
	if err := st.ScanCalls(ctx, time.Time{}, func(r *audit.Record) error {
		got = append(got, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Call.Responded {
		t.Fatalf("after reopening: %d calls, the first answered: %v; want the one call, answered", len(got), len(got) > 0 && got[0].Call.Responded)
	}
}

// TestLookupsByID_ReadOneSegment: the store looks a call up by id at its
// time (calllog.Log.GetAt) where it knows it, the held call's comparison
// and the completion of an answered call here, so that a lookup in a log
// of many sealed segments reads the tables of the segment holding it
// alone. With Get by id alone, every sealed segment's table was read
// (fails so: checked).
func TestLookupsByID_ReadOneSegment(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	recs := gen(t, 5).Records(400)
	slices.SortFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	k := slices.IndexFunc(recs, func(r audit.Record) bool { return r.Call.Responded })
	if k < 0 {
		t.Fatal("the generator gave no answered call")
	}
	answered := recs[k]
	c := *answered.Call
	c.Responded, c.Result, c.TransportError = false, nil, "timeout"
	recs[k].Call, recs[k].Outcome = &c, audit.OutcomeNoResponse
	opts := calllog.Options{SegmentBytes: 4 << 10, MaxGroupCalls: 10}
	st := open(t, dir, opts)
	for i := 0; i < len(recs); i += 10 {
		if _, err := st.AppendCalls(ctx, recs[i:i+10]); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	logs, err := calllogs.Open(calllogs.Dir(dir), opts)
	if err != nil {
		t.Fatal(err)
	}
	st, err = sqlite.Open(filepath.Join(dir, "audit.db"), sqlite.Options{Calls: sqlite.CallsLog, CallLog: logs})
	if err != nil {
		logs.Close()
		t.Fatal(err)
	}
	defer st.Close()
	if s, err := logs.Stats(); err != nil || s.Segments < 8 || s.TableLoads != 0 {
		t.Fatalf("after the open: %+v, %v; want 8 segments or more, no table read", s, err)
	}
	// The answer of the stored unanswered call (compared with it, then
	// completing it) and a call sent again (compared with it).
	if _, held, _, ans, err := st.AppendCallsAnswered(ctx, []audit.Record{answered, recs[len(recs)-20]}); err != nil || len(held) != 2 || len(ans) != 1 {
		t.Fatalf("the answer and a call sent again: held %v, answered %v, %v; want both held, the first answered", held, ans, err)
	}
	if err := st.Commit(ctx, audit.Results{Answered: []audit.CallRef{{Tenant: c.Tenant, ID: c.ID, Time: c.Time}}}); err != nil {
		t.Fatal(err)
	}
	s, err := logs.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// The log's own dedupe reads each call's segment once; the store's
	// lookups find them loaded. Two segments, one more if a call's
	// millisecond meets the segment before or after it.
	if s.TableLoads > 4 {
		t.Errorf("two calls looked up by id: %d sealed tables read of %d segments; want the two calls' segments alone", s.TableLoads, s.Segments)
	}
	page, err := st.Calls(ctx, audit.CallQuery{IDs: []string{c.ID}})
	if err != nil || len(page.Calls) != 1 || !page.Calls[0].Call.Responded {
		t.Fatalf("Calls by id of the answered call: %d calls, %v; want it answered", len(page.Calls), err)
	}
}

// BenchmarkNewest: the latest call of a tenant's log of some 20,000 calls
// in segments of 256 KiB, on disk.
func BenchmarkNewest(b *testing.B) {
	ctx := context.Background()
	logs, err := calllogs.Open(calllogs.Dir(b.TempDir()), calllog.Options{SegmentBytes: 256 << 10})
	if err != nil {
		b.Fatal(err)
	}
	defer logs.Close()
	g := gen(b, 4)
	for range 40 {
		if _, err := logs.Append(ctx, g.Records(500)); err != nil {
			b.Fatal(err)
		}
	}
	st, err := logs.Stats()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if n, err := logs.Newest(ctx); err != nil || n.IsZero() {
			b.Fatal(n, err)
		}
	}
	b.ReportMetric(float64(st.Segments), "segments")
}

// TestReady_OutOfInodes: on a disk out of inodes, where a new tenant's
// call log cannot be created, the append fails with ENOSPC and Ready
// says the store is not ready, though bytes are free, until an inode is
// freed. Before adv51 Ready counted free bytes alone: /readyz answered
// ready while every call was refused. A real tmpfs out of inodes.
func TestReady_OutOfInodes(t *testing.T) {
	root := tmpfs.Mount(t, "16m,nr_inodes=64")
	st := open(t, root, calllog.Options{})
	defer st.Close()
	ballast := tmpfs.FillInodes(t, root)
	if len(ballast) < 2 {
		t.Fatalf("%d inodes left for ballast", len(ballast))
	}
	if err := st.Ready(); err != nil {
		t.Fatalf("Ready before any write failed: %v", err)
	}
	recs := gen(t, 5).Records(10)
	_, err := st.AppendCalls(context.Background(), recs)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("AppendCalls of a new tenant's log out of inodes: %v, want ENOSPC", err)
	}
	// The sender's 503 names what could not be written (the receiver
	// takes the error's Writing): until fd52 the tenant's directory by its
	// base name, "-" for the default tenant's.
	var w interface{ Writing() string }
	if want := "calls/- (the call log directory of the default tenant)"; !errors.As(err, &w) || w.Writing() != want {
		got := "no Writing"
		if w != nil {
			got = w.Writing()
		}
		t.Errorf("AppendCalls out of inodes names %q as the file it was writing, want %q", got, want)
	}
	if err := st.Ready(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Ready out of inodes after a refused append: %v, want ENOSPC", err)
	}
	os.Remove(ballast[0])
	os.Remove(ballast[1])
	if err := st.Ready(); err != nil {
		t.Fatalf("Ready once inodes are freed: %v", err)
	}
	if _, err := st.AppendCalls(context.Background(), recs); err != nil {
		t.Fatalf("AppendCalls once inodes are freed: %v", err)
	}
}
