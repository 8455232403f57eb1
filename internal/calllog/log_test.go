package calllog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
	"github.com/mcpaudit/mcpaudit/internal/tmpfs"
)

// gen returns n generated calls; calls of different seeds may share ids
// (a call whose parts have no random run), so a test that wants other calls
// uses genAt with another start.
func gen(t testing.TB, seed uint64, n int) []audit.Record {
	return genAt(t, seed, storetest.T0, n)
}

func genAt(t testing.TB, seed uint64, start time.Time, n int) []audit.Record {
	t.Helper()
	g, err := storetest.NewGenerator(seed, start)
	if err != nil {
		t.Fatal(err)
	}
	return g.Records(n)
}

func open(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func appendAll(t testing.TB, l *Log, recs []audit.Record) []int {
	t.Helper()
	held, err := l.Append(context.Background(), recs)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return held
}

// same tells whether got is want as the store keeps it: id, time and the
// encoded record.
func same(got, want *audit.Record) bool {
	return got.Call.ID == want.Call.ID && got.Call.Time.Equal(want.Call.Time) &&
		bytes.Equal(sqlite.AppendRecord(nil, got), sqlite.AppendRecord(nil, want))
}

// scanAll returns the ids Scan gives in [from, to), checking time order.
func scanAll(t testing.TB, l *Log, from, to time.Time) []string {
	t.Helper()
	var ids []string
	var last time.Time
	err := l.Scan(context.Background(), from, to, func(r *audit.Record) error {
		if r.Call.Time.Before(last) {
			return fmt.Errorf("call %s at %s after one at %s", r.Call.ID, r.Call.Time, last)
		}
		last = r.Call.Time
		ids = append(ids, r.Call.ID)
		return nil
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return ids
}

// collect returns the ids a ByDocument or BySession gives, checking time
// order.
func collect(t testing.TB, by func(context.Context, string, time.Time, time.Time, func(*audit.Record) error) error,
	key string, from, to time.Time) []string {
	t.Helper()
	var ids []string
	var last time.Time
	if err := by(context.Background(), key, from, to, func(r *audit.Record) error {
		if r.Call.Time.Before(last) {
			return fmt.Errorf("call %s at %s after one at %s", r.Call.ID, r.Call.Time, last)
		}
		last = r.Call.Time
		ids = append(ids, r.Call.ID)
		return nil
	}); err != nil {
		t.Fatalf("%q: %v", key, err)
	}
	return ids
}

func idsOf(recs []audit.Record) []string {
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.Call.ID)
	}
	return ids
}

// sortedIDs returns the ids of recs in time order (ties by id), each once.
func sortedIDs(recs []audit.Record) []string {
	rs := slices.Clone(recs)
	slices.SortStableFunc(rs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	seen := map[string]bool{}
	var ids []string
	for _, r := range rs {
		if !seen[r.Call.ID] {
			seen[r.Call.ID] = true
			ids = append(ids, r.Call.ID)
		}
	}
	return ids
}

// sameSet compares id lists as sets of equal length (Scan orders calls of
// one time in no set order).
func sameSet(t testing.TB, what string, got, want []string) {
	t.Helper()
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	if !slices.Equal(g, w) {
		t.Fatalf("%s: %d calls, want %d", what, len(got), len(want))
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	recs := gen(t, 1, 3000)
	// Small segments: the calls spread over sealed segments and the live one.
	opts := Options{SegmentBytes: 64 << 10}
	l := open(t, dir, opts)
	for i := 0; i < len(recs); i += 250 {
		if held := appendAll(t, l, recs[i:i+250]); len(held) != 0 {
			t.Fatalf("batch %d: held %v of new calls", i/250, held)
		}
	}
	check := func(l *Log) {
		t.Helper()
		for i := range recs {
			got, ok, err := l.Get(context.Background(), recs[i].Call.ID)
			if err != nil || !ok {
				t.Fatalf("Get(%s) = %v, %v", recs[i].Call.ID, ok, err)
			}
			if !same(got, &recs[i]) {
				t.Fatalf("Get(%s) differs from the call appended", recs[i].Call.ID)
			}
		}
		if _, ok, err := l.Get(context.Background(), "c_00000000000000000000"); ok || err != nil {
			t.Fatalf("Get of an id never stored = %v, %v", ok, err)
		}
		want := sortedIDs(recs)
		got := scanAll(t, l, time.Time{}, time.Time{})
		sameSet(t, "Scan of everything", got, want)
		// A range: the calls of its times, no more.
		from, to := recs[1000].Call.Time, recs[2000].Call.Time
		var in []audit.Record
		for _, r := range recs {
			if !r.Call.Time.Before(from) && r.Call.Time.Before(to) {
				in = append(in, r)
			}
		}
		sameSet(t, "Scan of a range", scanAll(t, l, from, to), idsOf(in))
		// By document and by session: the calls that name it, no more,
		// for a few of each, over everything and over the range.
		for _, i := range []int{0, 777, 1500, 2999} {
			doc, session := "", recs[i].Call.Session
			if docs := recs[i].Documents(); len(docs) > 0 {
				doc = docs[0]
			}
			for _, rng := range [][2]time.Time{{}, {from, to}} {
				var byDoc, bySession []string
				for _, r := range recs {
					if rng[1].IsZero() || !r.Call.Time.Before(rng[0]) && r.Call.Time.Before(rng[1]) {
						if slices.Contains(r.Documents(), doc) {
							byDoc = append(byDoc, r.Call.ID)
						}
						if r.Call.Session == session {
							bySession = append(bySession, r.Call.ID)
						}
					}
				}
				if doc != "" {
					sameSet(t, "ByDocument "+doc, collect(t, l.ByDocument, doc, rng[0], rng[1]), byDoc)
				}
				if len(bySession) == 0 && rng[1].IsZero() {
					t.Fatalf("call %d: its session has no call", i)
				}
				sameSet(t, "BySession "+session, collect(t, l.BySession, session, rng[0], rng[1]), bySession)
			}
		}
	}
	check(l)
	st, err := l.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Segments < 3 || st.Calls != int64(len(recs)) {
		t.Fatalf("Stats = %+v: want several segments and %d calls", st, len(recs))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = open(t, dir, opts)
	defer l.Close()
	check(l)
	// Appending goes on after a reopen, and still holds back what is stored.
	if held := appendAll(t, l, recs[:10]); len(held) != 10 {
		t.Fatalf("stored calls sent again after a reopen: held %v, want all 10", held)
	}
}

func TestDedupe(t *testing.T) {
	t.Run("within_a_batch", func(t *testing.T) {
		l := open(t, t.TempDir(), Options{})
		defer l.Close()
		recs := gen(t, 2, 5)
		batch := append(slices.Clone(recs), recs[1], recs[3])
		if held := appendAll(t, l, batch); !slices.Equal(held, []int{5, 6}) {
			t.Fatalf("held %v, want [5 6]", held)
		}
		if got := scanAll(t, l, time.Time{}, time.Time{}); len(got) != 5 {
			t.Fatalf("stored %d calls, want 5", len(got))
		}
	})
	t.Run("across_segments", func(t *testing.T) {
		dir := t.TempDir()
		// Every block is a segment of its own: each group seals.
		opts := Options{SegmentBytes: 1}
		l := open(t, dir, opts)
		recs := gen(t, 3, 600)
		for i := 0; i < 600; i += 100 {
			appendAll(t, l, recs[i:i+100])
		}
		if st, _ := l.Stats(); st.Segments != 7 { // six sealed, one live and empty
			t.Fatalf("%d segments, want 7", st.Segments)
		}
		l.Close()
		l = open(t, dir, opts)
		defer l.Close()
		// Old calls sent again, mixed with new ones: the old are held
		// whichever sealed segment has them.
		more := genAt(t, 4, storetest.T0.Add(1000*time.Hour), 50)
		batch := append(slices.Clone(more[:25]), recs[5], recs[550], recs[250])
		batch = append(batch, more[25:]...)
		batch = append(batch, recs[599])
		if held := appendAll(t, l, batch); !slices.Equal(held, []int{25, 26, 27, 53}) {
			t.Fatalf("held %v, want [25 26 27 53]", held)
		}
		got := scanAll(t, l, time.Time{}, time.Time{})
		sameSet(t, "Scan", got, sortedIDs(append(slices.Clone(recs), more...)))
	})
	t.Run("two_carriers", func(t *testing.T) {
		// One call sent with its time in nanoseconds, then again with it
		// rounded to the millisecond (an OTLP span, then a call record):
		// one id. The first is alone in a sealed segment, whose time range
		// the second time is outside of, by less than half a millisecond.
		l := open(t, t.TempDir(), Options{SegmentBytes: 1})
		defer l.Close()
		recs := gen(t, 15, 2)
		ns := recs[0]
		c := *ns.Call
		c.Time = c.Time.Round(time.Millisecond).Add(300 * time.Microsecond)
		ns.Call = &c
		ms := recs[0]
		c2 := c
		c2.Time = c.Time.Round(time.Millisecond)
		ms.Call = &c2
		appendAll(t, l, []audit.Record{ns})
		if held := appendAll(t, l, []audit.Record{ms, recs[1]}); !slices.Equal(held, []int{0}) {
			t.Fatalf("the call sent again in milliseconds: held %v, want [0]", held)
		}
		if got := scanAll(t, l, time.Time{}, time.Time{}); len(got) != 2 {
			t.Fatalf("stored %d calls, want 2", len(got))
		}
	})
	t.Run("hash_collision", func(t *testing.T) {
		// Two ids of one hash are two calls: a match of the hash is checked
		// against the stored ids. No two real ids of FNV-64 collide in a
		// test's reach, so the live table is given a false entry for the
		// second id's hash, as a collision would leave it.
		l := open(t, t.TempDir(), Options{})
		defer l.Close()
		recs := gen(t, 5, 2)
		appendAll(t, l, recs[:1])
		l.mu.Lock()
		l.live.add(idHash(recs[1].Call.ID), nil, 0)
		l.mu.Unlock()
		if held := appendAll(t, l, recs[1:]); len(held) != 0 {
			t.Fatalf("a call whose hash matches another stored call was held")
		}
		if _, ok, err := l.Get(context.Background(), recs[1].Call.ID); !ok || err != nil {
			t.Fatalf("Get = %v, %v", ok, err)
		}
	})
}

// lastBlock returns the live segment's path and the offsets of its last
// block.
func lastBlock(t *testing.T, l *Log) (path string, start, end int64) {
	t.Helper()
	l.mu.RLock()
	defer l.mu.RUnlock()
	s := l.live
	r := s.blocks[len(s.blocks)-1]
	return s.path, r.off, r.off + int64(r.size)
}

// TestTornTail cuts the live segment at every byte of its last block, and
// flips every byte of it, as a crash between a write and its sync may leave
// it: every open keeps the blocks before and cuts the file where the last
// began; the next append and open work.
func TestTornTail(t *testing.T) {
	src := t.TempDir()
	recs := gen(t, 6, 23)
	l := open(t, src, Options{})
	appendAll(t, l, recs[:20])
	appendAll(t, l, recs[20:]) // the last block: 3 calls
	path, start, end := lastBlock(t, l)
	l.Close()
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(whole)) != end {
		t.Fatalf("segment of %d bytes, its last block ends at %d", len(whole), end)
	}
	want := sortedIDs(recs[:20])
	try := func(name string, data []byte) {
		t.Helper()
		dir := t.TempDir()
		p := filepath.Join(dir, filepath.Base(path))
		if err := os.WriteFile(p, data, 0o640); err != nil {
			t.Fatal(err)
		}
		l, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("%s: Open: %v", name, err)
		}
		defer l.Close()
		if fi, err := os.Stat(p); err != nil || fi.Size() != start {
			t.Fatalf("%s: segment not cut at %d: %v, %v", name, start, fi.Size(), err)
		}
		got := scanAll(t, l, time.Time{}, time.Time{})
		sameSet(t, name, got, want)
		if held := appendAll(t, l, recs[20:]); len(held) != 0 {
			t.Fatalf("%s: calls of the torn block held: %v", name, held)
		}
		l.Close()
		l2, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("%s: Open after the append: %v", name, err)
		}
		defer l2.Close()
		sameSet(t, name+", appended again", scanAll(t, l2, time.Time{}, time.Time{}), sortedIDs(recs))
	}
	for cut := start; cut < end; cut++ {
		try(fmt.Sprintf("cut at %d", cut), whole[:cut])
	}
	for at := start; at < end; at++ {
		data := slices.Clone(whole)
		data[at] ^= 0x40
		try(fmt.Sprintf("byte %d flipped", at), data)
	}
}

// TestCorruptMiddle: damage with a whole block after it is not a torn tail
// (the block after it was acknowledged): Open refuses the log and says
// where, and leaves the file as it was.
func TestCorruptMiddle(t *testing.T) {
	dir := t.TempDir()
	recs := gen(t, 7, 30)
	l := open(t, dir, Options{})
	appendAll(t, l, recs[:10])
	appendAll(t, l, recs[10:20])
	appendAll(t, l, recs[20:])
	l.mu.RLock()
	path, second := l.live.path, l.live.blocks[1]
	l.mu.RUnlock()
	l.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int64{second.off, second.off + 20, second.off + int64(second.size) - 1} {
		bad := slices.Clone(data)
		bad[at] ^= 1
		if err := os.WriteFile(path, bad, 0o640); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, Options{})
		var ce *CorruptError
		if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.Offset != second.off {
			t.Fatalf("byte %d flipped: Open = %v, want a CorruptError at %d", at, err, second.off)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, bad) {
			t.Fatalf("byte %d flipped: Open changed the file", at)
		}
	}
}

// TestSealedIndex: a sealed segment whose index is missing or damaged is
// indexed again from its blocks; a damaged sealed segment is refused.
func TestSealedIndex(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1}
	recs := gen(t, 8, 40)
	l := open(t, dir, opts)
	appendAll(t, l, recs[:20])
	appendAll(t, l, recs[20:])
	l.mu.RLock()
	first := l.sealed[0].path
	l.mu.RUnlock()
	l.Close()
	idx := idxPath(first)
	data, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string) {
		t.Helper()
		l := open(t, dir, opts)
		defer l.Close()
		sameSet(t, name, scanAll(t, l, time.Time{}, time.Time{}), sortedIDs(recs))
		if held := appendAll(t, l, recs[:20]); len(held) != 20 {
			t.Fatalf("%s: held %d of 20 stored calls", name, len(held))
		}
		if got, err := os.ReadFile(idx); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: the index written again differs (%v)", name, err)
		}
	}
	os.Remove(idx)
	check("index removed")
	bad := slices.Clone(data)
	bad[len(bad)/2] ^= 1
	os.WriteFile(idx, bad, 0o640)
	check("index damaged")
	seg, _ := os.ReadFile(first)
	os.Remove(idx)
	os.WriteFile(first, seg[:len(seg)-1], 0o640)
	if _, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a sealed segment cut short: Open = %v, want ErrCorrupt", err)
	}
}

// TestRetention removes whole sealed segments wholly before the time, and
// never the live one.
func TestRetention(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1}
	recs := gen(t, 9, 300)
	l := open(t, dir, opts)
	defer l.Close()
	for i := 0; i < 300; i += 100 {
		appendAll(t, l, recs[i:i+100])
	}
	// The second segment's earliest call: the first segment is wholly
	// before it.
	l.mu.RLock()
	cut := sqlite.NanosTime(l.sealed[1].min)
	firstPath := l.sealed[0].path
	l.mu.RUnlock()
	n, err := l.DeleteBefore(cut)
	if err != nil || n != 100 {
		t.Fatalf("DeleteBefore = %d, %v; want 100", n, err)
	}
	for _, p := range []string{firstPath, idxPath(firstPath)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still there: %v", p, err)
		}
	}
	sameSet(t, "after retention", scanAll(t, l, time.Time{}, time.Time{}), sortedIDs(recs[100:]))
	if _, ok, _ := l.Get(context.Background(), recs[0].Call.ID); ok {
		t.Fatal("a call of a removed segment is still found")
	}
	// Everything: the sealed segments go, the live one stays.
	if n, err := l.DeleteBefore(storetest.T0.Add(1000 * time.Hour)); err != nil || n != 200 {
		t.Fatalf("DeleteBefore = %d, %v; want 200", n, err)
	}
	if st, _ := l.Stats(); st.Segments != 1 || st.Calls != 0 {
		t.Fatalf("Stats = %+v, want the live segment alone", st)
	}
}

// TestConcurrentAppend: appenders sending overlapping calls at once store
// each call once, and each is acknowledged to the one that stored it or
// held for the others. Run it with -race.
func TestConcurrentAppend(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 32 << 10}
	l := open(t, dir, opts)
	recs := gen(t, 10, 2000)
	const workers = 8
	var wg sync.WaitGroup
	stored := make([]int, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each worker sends its own quarter and half of its
			// neighbour's, in batches of 50.
			mine := recs[w*250 : (w+1)*250]
			next := recs[((w+1)%workers)*250:][:125]
			all := append(slices.Clone(mine), next...)
			for i := 0; i < len(all); i += 50 {
				batch := all[i:min(i+50, len(all))]
				held, err := l.Append(context.Background(), batch)
				if err != nil {
					t.Error(err)
					return
				}
				stored[w] += len(batch) - len(held)
				if w%2 == 0 {
					// Readers meanwhile.
					if _, ok, err := l.Get(context.Background(), batch[0].Call.ID); !ok || err != nil {
						t.Errorf("Get of an acknowledged call = %v, %v", ok, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, n := range stored {
		total += n
	}
	if total != len(recs) {
		t.Fatalf("appenders stored %d calls in all, want %d", total, len(recs))
	}
	sameSet(t, "Scan", scanAll(t, l, time.Time{}, time.Time{}), sortedIDs(recs))
	l.Close()
	l = open(t, dir, opts)
	defer l.Close()
	sameSet(t, "Scan after a reopen", scanAll(t, l, time.Time{}, time.Time{}), sortedIDs(recs))
}

func TestAppendRefuses(t *testing.T) {
	l := open(t, t.TempDir(), Options{Tenant: "acme"})
	recs := gen(t, 11, 2)
	if _, err := l.Append(context.Background(), recs); !errors.Is(err, ErrTenant) {
		t.Fatalf("a call of another tenant: %v, want ErrTenant", err)
	}
	for i := range recs {
		c := *recs[i].Call
		c.Tenant = "acme"
		recs[i].Call = &c
	}
	recs[1].Call.Time = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := l.Append(context.Background(), recs); !errors.Is(err, ErrTime) {
		t.Fatalf("a call in the year 3000: %v, want ErrTime", err)
	}
	if got := scanAll(t, l, time.Time{}, time.Time{}); len(got) != 0 {
		t.Fatalf("a refused batch stored %d calls", len(got))
	}
	was := maxAppendBytes
	maxAppendBytes = 1000
	recs[1].Call.Time = recs[0].Call.Time
	_, err := l.Append(context.Background(), recs)
	maxAppendBytes = was
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("an append past a block's size: %v, want ErrTooLarge", err)
	}
	l.Close()
	if _, err := l.Append(context.Background(), recs[:1]); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
	if _, _, err := l.Get(context.Background(), recs[0].Call.ID); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
}

// TestCrashKill kills a process appending to a log with SIGKILL, at three
// points, and reopens the log: every call acknowledged before the kill is
// there, and the log takes appends again. A killed process leaves what it
// wrote in the page cache, so this shows the recovery of a process crash
// (a block cut by the kill, a segment sealed halfway); what a power loss
// leaves of a block is TestTornTail's.
func TestCrashKill(t *testing.T) {
	const batch, batches = 50, 400
	if dir := os.Getenv("CALLLOG_CHILD_DIR"); dir != "" {
		appendUntilKilled(t, dir, Options{SegmentBytes: 256 << 10}, gen(t, 12, batch*batches), batch)
	}
	if testing.Short() {
		t.Skip("starts three processes")
	}
	recs := gen(t, 12, batch*batches)
	dir := t.TempDir()
	acked := -1
	for round, after := range []int{20, 60, 120} {
		cmd, sc := startAppender(t, "TestCrashKill", "CALLLOG_CHILD_DIR="+dir)
		killed := false
		for sc.Scan() {
			var i int
			if _, err := fmt.Sscanf(sc.Text(), "acked %d", &i); err != nil {
				continue
			}
			acked = max(acked, i)
			if i >= after && !killed {
				cmd.Process.Kill() // SIGKILL: mid-append, the next batch's
				killed = true
			}
		}
		cmd.Wait()
		if !killed {
			t.Fatalf("round %d: the child ended before batch %d", round, after)
		}
		l := open(t, dir, Options{SegmentBytes: 256 << 10})
		for i := range (acked + 1) * batch {
			if _, ok, err := l.Get(context.Background(), recs[i].Call.ID); !ok || err != nil {
				t.Fatalf("round %d: call %d of batch %d, acknowledged, not found after the kill (%v)", round, i, i/batch, err)
			}
		}
		// The children start again from batch 0: what was stored is held.
		if held := appendAll(t, l, recs[:batch]); len(held) != batch {
			t.Fatalf("round %d: held %d of %d stored calls", round, len(held), batch)
		}
		l.Close()
	}
}

// TestDiskFull fills a real disk (a tmpfs of 1 MiB) with appends: the
// append that meets ENOSPC fails, no acknowledged call is lost, neither
// while the log stays open nor when its files are opened again elsewhere,
// and nothing torn is left where the next open would refuse it.
func TestDiskFull(t *testing.T) {
	dir := filepath.Join(tmpfs.Mount(t, "1m"), "calls")
	recs := gen(t, 13, 20000)
	l := open(t, dir, Options{SegmentBytes: 256 << 10})
	acked := 0
	var err error
	for ; acked < len(recs); acked += 100 {
		if _, err = l.Append(context.Background(), recs[acked:acked+100]); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("after %d calls: %v, want ENOSPC", acked, err)
	}
	for i := range acked {
		if _, ok, err := l.Get(context.Background(), recs[i].Call.ID); !ok || err != nil {
			t.Fatalf("call %d, acknowledged, not found on the full disk: %v, %v", i, ok, err)
		}
	}
	l.Close()
	moved := t.TempDir()
	if out, err := exec.Command("cp", "-a", dir+"/.", moved).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	l = open(t, moved, Options{SegmentBytes: 256 << 10})
	defer l.Close()
	got := scanAll(t, l, time.Time{}, time.Time{})
	if len(got) < acked {
		t.Fatalf("%d calls after the disk filled, %d acknowledged", len(got), acked)
	}
	for i := range acked {
		if _, ok, err := l.Get(context.Background(), recs[i].Call.ID); !ok || err != nil {
			t.Fatalf("call %d, acknowledged, not found after reopening: %v, %v", i, ok, err)
		}
	}
}

func TestIDWindow(t *testing.T) {
	f := func(at time.Time) {
		t.Helper()
		n, _ := sqlite.TimeNanos(at)
		lo, hi := idWindow(n)
		m := at.Round(time.Millisecond)
		// Every time rounding to at's millisecond is in the window, and
		// the times just outside round elsewhere.
		wlo, _ := sqlite.TimeNanos(m.Add(-500 * time.Microsecond))
		whi, _ := sqlite.TimeNanos(m.Add(500*time.Microsecond - 1))
		if lo != wlo || hi != whi {
			t.Fatalf("idWindow(%s) = [%d, %d], want [%d, %d]", at, lo, hi, wlo, whi)
		}
		if sqlite.NanosTime(lo).Round(time.Millisecond) != m || sqlite.NanosTime(hi).Round(time.Millisecond) != m ||
			sqlite.NanosTime(lo-1).Round(time.Millisecond) == m || sqlite.NanosTime(hi+1).Round(time.Millisecond) == m {
			t.Fatalf("idWindow(%s) = [%d, %d] is not the times rounding to %s", at, lo, hi, m)
		}
	}
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	f(t0)
	f(t0.Add(300 * time.Microsecond))
	f(t0.Add(499_999))
	f(t0.Add(500_000))
	f(t0.Add(-1))
	f(time.Date(1969, 12, 31, 23, 59, 59, 999_700_000, time.UTC))
	f(time.Date(1900, 1, 1, 0, 0, 0, 400_000, time.UTC))
}

// TestGetAt: a lookup given the call's time finds every stored call in
// whichever segment holds it, with its time in nanoseconds or rounded to
// the millisecond, and looks in the segments covering that time alone: a
// time of another millisecond finds nothing.
func TestGetAt(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 16 << 10}
	recs := gen(t, 14, 2000)
	l := open(t, dir, opts)
	for i := 0; i < len(recs); i += 100 {
		appendAll(t, l, recs[i:i+100])
	}
	check := func(l *Log) {
		t.Helper()
		for i := range recs {
			at := recs[i].Call.Time
			for _, tt := range []time.Time{at, at.Round(time.Millisecond)} {
				got, ok, err := l.GetAt(context.Background(), recs[i].Call.ID, tt)
				if err != nil || !ok || !same(got, &recs[i]) {
					t.Fatalf("GetAt(%s, %s) = %v, %v", recs[i].Call.ID, tt, ok, err)
				}
			}
		}
		// Sealed segments hold calls of other times only: not looked in.
		l.mu.RLock()
		if len(l.sealed) < 3 {
			t.Fatalf("%d sealed segments, want several", len(l.sealed))
		}
		first := l.sealed[0]
		l.mu.RUnlock()
		id := recs[0].Call.ID
		if _, ok, err := l.GetAt(context.Background(), id, sqlite.NanosTime(first.max).Add(time.Hour)); ok || err != nil {
			t.Fatalf("GetAt of a sealed call at a time its segment does not cover = %v, %v", ok, err)
		}
		if _, ok, err := l.Get(context.Background(), id); !ok || err != nil {
			t.Fatalf("Get = %v, %v", ok, err)
		}
	}
	check(l)
	l.Close()
	l = open(t, dir, opts)
	defer l.Close()
	check(l)
	if _, _, err := l.GetAt(context.Background(), recs[0].Call.ID, time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)); !errors.Is(err, ErrTime) {
		t.Fatalf("GetAt in the year 3000: %v, want ErrTime", err)
	}
}

// TestScanDuringRetention: retention removing every sealed segment while
// a scan reads them does not end the scan: it gives every call it began
// with, and the files are gone as soon as DeleteBefore returns.
func TestScanDuringRetention(t *testing.T) {
	// Also with the segments' files closed by the cache (a bound of
	// one): retention opens them for the scan before the unlink (fd52),
	// and they are closed once it ends.
	for _, c := range []struct {
		name  string
		files *Files
	}{{"cached", nil}, {"uncached", NewFiles(1)}} {
		t.Run(c.name, func(t *testing.T) {
			l := open(t, t.TempDir(), Options{SegmentBytes: 1, Files: c.files})
			defer l.Close()
			recs := gen(t, 16, 500)
			for i := 0; i < len(recs); i += 100 {
				appendAll(t, l, recs[i:i+100])
			}
			l.mu.RLock()
			var paths []string
			for _, s := range l.sealed {
				paths = append(paths, s.path, idxPath(s.path))
			}
			l.mu.RUnlock()
			var ids []string
			err := l.Scan(context.Background(), time.Time{}, time.Time{}, func(r *audit.Record) error {
				if len(ids) == 0 {
					if n, err := l.DeleteBefore(storetest.T0.Add(1000 * time.Hour)); err != nil || n != 500 {
						return fmt.Errorf("DeleteBefore = %d, %v; want 500", n, err)
					}
					for _, p := range paths {
						if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
							return fmt.Errorf("%s still there after DeleteBefore: %v", p, err)
						}
					}
				}
				ids = append(ids, r.Call.ID)
				return nil
			})
			if err != nil {
				t.Fatalf("Scan racing DeleteBefore: %v", err)
			}
			sameSet(t, "Scan racing DeleteBefore", ids, sortedIDs(recs))
			if got := scanAll(t, l, time.Time{}, time.Time{}); len(got) != 0 {
				t.Fatalf("a scan after retention gives %d calls", len(got))
			}
			if c.files != nil {
				if st := c.files.Stats(); st.Open != 0 {
					t.Errorf("%d sealed files open after the scan of the segments retention removed, want 0", st.Open)
				}
			}
		})
	}
}

// TestAgeSeal: an idle log seals its live segment once its first block is
// SegmentAge old, by a timer, with no commit to check it; the index is
// there after a reopen.
func TestAgeSeal(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentAge: 50 * time.Millisecond}
	l := open(t, dir, opts)
	recs := gen(t, 17, 100)
	appendAll(t, l, recs)
	// Waits for the timer; on a log that seals at a commit alone it never
	// comes, and the test fails after a minute.
	deadline := time.Now().Add(time.Minute)
	for {
		l.mu.RLock()
		n := len(l.sealed)
		l.mu.RUnlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the live segment, idle, was not sealed after its age")
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.mu.RLock()
	idx := idxPath(l.sealed[0].path)
	l.mu.RUnlock()
	if _, err := os.Stat(idx); err != nil {
		t.Fatalf("no index for the segment sealed by age: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = open(t, dir, opts)
	defer l.Close()
	sameSet(t, "after a reopen", scanAll(t, l, time.Time{}, time.Time{}), sortedIDs(recs))
	if held := appendAll(t, l, recs); len(held) != len(recs) {
		t.Fatalf("held %d of %d stored calls", len(held), len(recs))
	}
}

// TestSealFails: a seal that fails (no inode left on a real tmpfs for the
// next segment or the index: appends to the live segment still fit) does
// not refuse appends: they go on into the live segment, and the seal is
// tried again at the next commit, which seals once inodes are freed.
func TestSealFails(t *testing.T) {
	// Mount passes its size to mount -o size=…: the inode limit rides
	// along.
	root := tmpfs.Mount(t, "8m,nr_inodes=64")
	dir := filepath.Join(root, "calls")
	// OnSeal is called from the committer alone; the test reads it
	// between appends, which wait for the committer.
	var heard []error
	opts := Options{SegmentBytes: 1, OnSeal: func(err error) { heard = append(heard, err) }}
	l := open(t, dir, opts)
	defer l.Close()
	// Every inode left goes to ballast.
	ballast := tmpfs.FillInodes(t, root)
	if len(ballast) < 2 {
		t.Fatalf("%d inodes left for ballast", len(ballast))
	}
	recs := gen(t, 18, 500)
	for i := 0; i < 300; i += 100 {
		if _, err := l.Append(context.Background(), recs[i:i+100]); err != nil {
			t.Fatalf("batch %d, its seal failing: %v", i/100, err)
		}
	}
	if st, _ := l.Stats(); st.Segments != 1 || st.Calls != 300 {
		t.Fatalf("Stats = %+v while seals fail, want one live segment of 300 calls", st)
	}
	// Three seals failed: OnSeal heard the first (adv51: before, nothing
	// said so, and serve logged nothing while its live segment grew).
	if len(heard) != 1 || !errors.Is(heard[0], syscall.ENOSPC) {
		t.Fatalf("OnSeal heard %v while seals fail, want one ENOSPC", heard)
	}
	for _, p := range ballast[:2] {
		os.Remove(p)
	}
	appendAll(t, l, recs[300:400])
	l.mu.RLock()
	sealed := len(l.sealed)
	l.mu.RUnlock()
	if sealed != 1 {
		t.Fatalf("%d sealed segments once inodes are freed, want 1", sealed)
	}
	if len(heard) != 2 || heard[1] != nil {
		t.Fatalf("OnSeal heard %v once inodes are freed, want the failure, then nil", heard)
	}
	for i := range 400 {
		if _, ok, err := l.GetAt(context.Background(), recs[i].Call.ID, recs[i].Call.Time); !ok || err != nil {
			t.Fatalf("call %d: %v, %v", i, ok, err)
		}
	}
	l.Close()
	for _, p := range ballast[2:] {
		os.Remove(p)
	}
	l = open(t, dir, opts)
	defer l.Close()
	sameSet(t, "after a reopen", scanAll(t, l, time.Time{}, time.Time{}), sortedIDs(recs[:400]))
	appendAll(t, l, recs[400:])
}

// TestBlockHashes: the hashes OnBlock gives at commit are those of the
// bytes in the file, BlockHashes reads the same back after a reopen, and a
// byte flipped in a block changes that block's hash alone.
func TestBlockHashes(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var given []BlockInfo
	opts := Options{SegmentBytes: 16 << 10, OnBlock: func(b BlockInfo) {
		mu.Lock()
		given = append(given, b)
		mu.Unlock()
	}}
	l := open(t, dir, opts)
	recs := gen(t, 19, 1500)
	for i := 0; i < len(recs); i += 100 {
		appendAll(t, l, recs[i:i+100])
	}
	l.Close()
	mu.Lock()
	defer mu.Unlock()
	calls := 0
	for _, b := range given {
		data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%020d.seg", b.Segment)))
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(data[b.Offset:b.Offset+int64(b.Size)]) != b.SHA256 {
			t.Fatalf("block %d of segment %d: OnBlock's hash is not the file's bytes'", b.Block, b.Segment)
		}
		calls += b.Calls
	}
	if calls != len(recs) || len(given) != 15 {
		t.Fatalf("OnBlock gave %d blocks of %d calls, want 15 of %d", len(given), calls, len(recs))
	}
	read := func() []BlockInfo {
		t.Helper()
		l := open(t, dir, Options{SegmentBytes: 16 << 10})
		defer l.Close()
		segs, err := l.Segments()
		if err != nil {
			t.Fatal(err)
		}
		var got []BlockInfo
		for _, s := range segs {
			if err := l.BlockHashes(context.Background(), s.Segment, func(b BlockInfo) error {
				got = append(got, b)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.BlockHashes(context.Background(), 999, func(BlockInfo) error { return nil }); !errors.Is(err, ErrNoSegment) {
			t.Fatalf("BlockHashes of no segment: %v, want ErrNoSegment", err)
		}
		return got
	}
	got := read()
	if len(got) != len(given) {
		t.Fatalf("%d blocks read back, %d given", len(got), len(given))
	}
	for i := range got {
		if got[i] != given[i] {
			t.Fatalf("block %d read back after a reopen: %+v, given at commit %+v", i, got[i], given[i])
		}
	}
	// A byte of a sealed segment's second block flipped.
	b := given[1]
	path := filepath.Join(dir, fmt.Sprintf("%020d.seg", b.Segment))
	data, _ := os.ReadFile(path)
	data[b.Offset+int64(b.Size)/2] ^= 1
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
	got = read()
	for i := range got {
		if changed := got[i].SHA256 != given[i].SHA256; changed != (i == 1) {
			t.Fatalf("block %d, a byte of block 1 flipped: hash changed %v", i, changed)
		}
	}
}

// TestSnapshot takes a snapshot while appenders go on (run it with -race):
// the copy, opened, holds every call acknowledged before Snapshot began,
// and its open cuts nothing from its live segment.
func TestSnapshot(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "snap")
	opts := Options{SegmentBytes: 32 << 10}
	l := open(t, src, opts)
	defer l.Close()
	const workers, batch = 3, 50
	recs := gen(t, 20, 9000)
	per := len(recs) / workers
	var mu sync.Mutex
	acked := make([]int, workers) // batches acknowledged, each worker's
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := recs[w*per : (w+1)*per]
			for i := 0; (i+1)*batch <= len(mine); i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := l.Append(context.Background(), mine[i*batch:(i+1)*batch]); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked[w] = i + 1
				mu.Unlock()
			}
		}()
	}
	// Snapshot once a few segments are sealed and appends are running.
	for {
		mu.Lock()
		n := acked[0] + acked[1] + acked[2]
		mu.Unlock()
		if n >= 60 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	before := slices.Clone(acked)
	mu.Unlock()
	if err := l.Snapshot(dst); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	close(stop)
	wg.Wait()
	if err := l.Snapshot(dst); err == nil {
		t.Fatal("a snapshot into a directory holding one: no error")
	}
	names, _ := os.ReadDir(dst)
	sizes := map[string]int64{}
	for _, e := range names {
		fi, _ := e.Info()
		sizes[e.Name()] = fi.Size()
	}
	c := open(t, dst, opts)
	defer c.Close()
	for name, size := range sizes {
		if fi, err := os.Stat(filepath.Join(dst, name)); err != nil || fi.Size() != size {
			t.Fatalf("Open of the snapshot changed %s (%d bytes before): %v", name, size, err)
		}
	}
	segs, err := c.Segments()
	if err != nil || len(segs) < 3 {
		t.Fatalf("the snapshot has %d segments (%v), want several", len(segs), err)
	}
	want := 0
	for w := range workers {
		mine := recs[w*per : (w+1)*per]
		for i := range before[w] * batch {
			if _, ok, err := c.GetAt(context.Background(), mine[i].Call.ID, mine[i].Call.Time); !ok || err != nil {
				t.Fatalf("worker %d's call %d, acknowledged before the snapshot, not in it: %v, %v", w, i, ok, err)
			}
		}
		want += before[w] * batch
	}
	if got := scanAll(t, c, time.Time{}, time.Time{}); len(got) < want {
		t.Fatalf("the snapshot's scan gives %d calls, %d were acknowledged before it", len(got), want)
	}
}

// TestTablesOnDemand: a reopened log holds no sealed segment's id or key
// table; a lookup reads the tables of the segments it looks in alone, and
// past TableBytes those used least lately are let go, every lookup still
// answering.
func TestTablesOnDemand(t *testing.T) {
	dir := t.TempDir()
	recs := gen(t, 21, 2000)
	l := open(t, dir, Options{SegmentBytes: 1})
	for i := 0; i < len(recs); i += 100 {
		appendAll(t, l, recs[i:i+100])
	}
	l.Close()
	// A bound below one segment's tables: one kept at a time.
	l = open(t, dir, Options{SegmentBytes: 1, TableBytes: 1})
	defer l.Close()
	loaded := func() (n int, loads int64) {
		l.tables.mu.Lock()
		defer l.tables.mu.Unlock()
		return len(l.tables.m), l.tables.loads
	}
	if n, loads := loaded(); n != 0 || loads != 0 {
		t.Fatalf("after open: %d tables loaded (%d reads), want none", n, loads)
	}
	r := &recs[1234]
	if _, ok, err := l.GetAt(context.Background(), r.Call.ID, r.Call.Time); !ok || err != nil {
		t.Fatalf("GetAt = %v, %v", ok, err)
	}
	if n, loads := loaded(); n != 1 || loads != 1 {
		t.Fatalf("after one GetAt: %d tables loaded (%d reads), want 1", n, loads)
	}
	for i := range recs {
		if _, ok, err := l.Get(context.Background(), recs[i].Call.ID); !ok || err != nil {
			t.Fatalf("Get(%d) = %v, %v", i, ok, err)
		}
	}
	if n, loads := loaded(); n != 1 || loads < 20 {
		t.Fatalf("after Get of every call: %d tables kept (%d reads), want 1 kept", n, loads)
	}
	doc := recs[0].Documents()
	if len(doc) > 0 {
		var want []string
		for _, r := range recs {
			if slices.Contains(r.Documents(), doc[0]) {
				want = append(want, r.Call.ID)
			}
		}
		sameSet(t, "ByDocument", collect(t, l.ByDocument, doc[0], time.Time{}, time.Time{}), want)
	}
	if held := appendAll(t, l, recs[:300]); len(held) != 300 {
		t.Fatalf("held %d of 300 stored calls", len(held))
	}
	// An index damaged after the open is refused at the lookup that reads it.
	l.mu.RLock()
	s := l.sealed[5]
	l.mu.RUnlock()
	l.tables.drop(s.num)
	data, _ := os.ReadFile(idxPath(s.path))
	data[len(data)/2] ^= 1
	os.WriteFile(idxPath(s.path), data, 0o640)
	if _, _, err := l.Get(context.Background(), "c_00000000000000000000"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get with an index damaged after the open: %v, want ErrCorrupt", err)
	}
}

// TestSealCrashWindow: a crash while a seal is under way leaves the next
// segment created (the seal creates it first) and the live one whole,
// without its index: the open indexes the live one as sealed and appends
// to the next, every call there.
func TestSealCrashWindow(t *testing.T) {
	dir := t.TempDir()
	recs := gen(t, 22, 300)
	l := open(t, dir, Options{})
	appendAll(t, l, recs[:200])
	l.mu.RLock()
	num := l.live.num
	l.mu.RUnlock()
	l.Close()
	if err := os.WriteFile(l.segPath(num+1), []byte(segMagic), 0o640); err != nil {
		t.Fatal(err)
	}
	l = open(t, dir, Options{})
	defer l.Close()
	segs, err := l.Segments()
	if err != nil || len(segs) != 2 || !segs[0].Sealed || segs[0].Calls != 200 || segs[1].Segment != num+1 {
		t.Fatalf("Segments = %+v, %v; want segment %d sealed with 200 calls, %d live", segs, err, num, num+1)
	}
	if _, err := os.Stat(idxPath(l.segPath(num))); err != nil {
		t.Fatalf("the segment left without its index was not indexed: %v", err)
	}
	appendAll(t, l, recs[200:])
	sameSet(t, "after the crash", scanAll(t, l, time.Time{}, time.Time{}), sortedIDs(recs))
}

// TestStaleIndex: an index that a failed seal left on disk (its rename
// durable, the error after it) while the segment stayed live and took more
// blocks is not taken for the segment's: the open recovers the segment as
// live, every call there.
func TestStaleIndex(t *testing.T) {
	recs := gen(t, 23, 200)
	// The index of the segment's first block alone: the same calls
	// appended alone and sealed (blocks are encoded the same).
	sealed := t.TempDir()
	l := open(t, sealed, Options{SegmentBytes: 1})
	appendAll(t, l, recs[:100])
	l.Close()
	dir := t.TempDir()
	l = open(t, dir, Options{})
	appendAll(t, l, recs[:100])
	appendAll(t, l, recs[100:])
	seg := l.segPath(1)
	l.Close()
	idx, err := os.ReadFile(idxPath(filepath.Join(sealed, filepath.Base(seg))))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idxPath(seg), idx, 0o640); err != nil {
		t.Fatal(err)
	}
	l = open(t, dir, Options{})
	defer l.Close()
	sameSet(t, "with a stale index", scanAll(t, l, time.Time{}, time.Time{}), sortedIDs(recs))
	if segs, _ := l.Segments(); len(segs) != 1 || segs[0].Sealed {
		t.Fatalf("Segments = %+v, want segment 1 live", segs)
	}
	if _, err := os.Stat(idxPath(seg)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stale index is still there: %v", err)
	}
}

// TestNewest: the latest call's time, from the segments' time index (no
// block read), sealed segments and the live one, read-only too.
func TestNewest(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{SegmentBytes: 1})
	if n, err := l.Newest(); err != nil || !n.IsZero() {
		t.Fatalf("Newest of an empty log = %v, %v; want zero", n, err)
	}
	recs := gen(t, 41, 300)
	var want time.Time
	for i := 0; i < len(recs); i += 50 {
		appendAll(t, l, recs[i:i+50])
	}
	for _, r := range recs {
		if r.Call.Time.After(want) {
			want = r.Call.Time
		}
	}
	l.Close()
	for _, ro := range []bool{false, true} {
		l := open(t, dir, Options{SegmentBytes: 1, ReadOnly: ro})
		if n, err := l.Newest(); err != nil || !n.Equal(want) {
			t.Errorf("Newest (read-only %v) = %v, %v; want %v", ro, n, err, want)
		}
		if len(l.cache.m) != 0 {
			t.Errorf("Newest (read-only %v) read %d blocks, want none", ro, len(l.cache.m))
		}
		l.Close()
		if _, err := l.Newest(); !errors.Is(err, ErrClosed) {
			t.Errorf("Newest after Close = %v, want ErrClosed", err)
		}
	}
}

// bigCalls returns n calls of about 1 MiB each (their result), one
// second apart from start.
func bigCalls(t testing.TB, n int) []audit.Record {
	recs := genAt(t, 31, storetest.T0, n)
	for i := range recs {
		c := *recs[i].Call
		c.Result = append([]byte(`{"text":"`), append(bytes.Repeat([]byte{'a' + byte(i%26)}, 1<<20), `"}`...)...)
		c.Time = storetest.T0.Add(time.Duration(i) * time.Second)
		recs[i].Call = &c
	}
	return recs
}

// retainedAfter returns how many bytes more the heap holds after fn, once
// collected.
func retainedAfter(fn func()) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// TestBlockCache_BoundedByBytes: reading 48 blocks of one 1 MiB call
// each leaves at most the cache's bound (16 MiB by default) of decoded
// blocks resident, not 32 blocks of any size: before dbt51 it held the
// last 32, 32 MiB here and 32 times the block size whatever it was.
func TestBlockCache_BoundedByBytes(t *testing.T) {
	l := open(t, t.TempDir(), Options{})
	defer l.Close()
	recs := bigCalls(t, 48)
	for i := range recs {
		appendAll(t, l, recs[i:i+1]) // one block each
	}
	n := 0
	kept := retainedAfter(func() {
		if err := l.Scan(context.Background(), time.Time{}, time.Time{}, func(*audit.Record) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
	})
	if n != len(recs) {
		t.Fatalf("Scan read %d calls, want %d", n, len(recs))
	}
	if kept > 24<<20 {
		t.Errorf("the heap holds %.1f MiB more after reading 48 blocks of 1 MiB, want at most the cache's 16 MiB and change", float64(kept)/(1<<20))
	}
	runtime.KeepAlive(l)
}

// TestTables_ReadWithoutCacheLock: while a lookup reads a sealed
// segment's index (a FIFO in its place, so that the read waits for the
// test: a real file's read cannot be held), the table cache's lock is
// free, so lookups whose tables are loaded go on. Before dbt51 the read
// held it.
func TestTables_ReadWithoutCacheLock(t *testing.T) {
	dir := t.TempDir()
	recs := gen(t, 51, 400)
	l := open(t, dir, Options{SegmentBytes: 1})
	defer l.Close()
	for i := 0; i < len(recs); i += 100 {
		appendAll(t, l, recs[i:i+100])
	}
	l.mu.RLock()
	s := l.sealed[0]
	l.mu.RUnlock()
	l.tables.drop(s.num)
	idx := idxPath(s.path)
	data, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fifo, idx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, ok, err := l.Get(context.Background(), recs[0].Call.ID)
		if err == nil && !ok {
			err = errors.New("not found")
		}
		done <- err
	}()
	// The open returns once the lookup has opened the index: it is in its
	// read, which waits for what is written below.
	w, err := os.OpenFile(idx, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.tables.mu.TryLock() {
		l.tables.mu.Unlock()
	} else {
		t.Error("the table cache is locked while a lookup reads an index: every lookup waits for that read")
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := <-done; err != nil {
		t.Fatalf("Get of a call of the segment whose index was read: %v", err)
	}
	if loads := l.tables.loads; loads != 1 {
		t.Errorf("%d index reads, want 1", loads)
	}
}
