package sqlite

import (
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
	"github.com/mcpaudit/mcpaudit/internal/spool"
)

func TestConformance_AckLog(t *testing.T) {
	storetest.Run(t, func(t *testing.T) audit.Store { return openTemp(t, Options{Ack: AckLog}) })
}

// TestConformance_AckLogSmallChunks is TestConformance_SmallChunks with
// ack "log": transactions of one request each.
func TestConformance_AckLogSmallChunks(t *testing.T) {
	storetest.Run(t, func(t *testing.T) audit.Store {
		return openTemp(t, Options{Ack: AckLog, DeleteChunk: 1, MaxBatch: 1})
	})
}

// countBatches is a sequence of appends whose counts depend on what is
// stored, pending, or earlier in the same batch: new calls, copies inside
// a batch, calls stored before, another tenant's copies, and a call of the
// same id and tenant a millisecond later (another key).
func countBatches(t *testing.T) [][]audit.Record {
	recs := records(t, 300)
	later := recs[5]
	c := *later.Call
	c.Time = c.Time.Add(time.Millisecond)
	later.Call = &c
	dup := append(append([]audit.Record{}, recs[100:150]...), recs[120], recs[120], recs[149])
	return [][]audit.Record{
		recs[:100],
		recs[50:150],
		dup,
		recs[:10],
		withTenant(recs[:20], "acme"),
		append(withTenant(recs[10:30], "acme"), recs[150:160]...),
		{later, recs[5], later},
		append(append([]audit.Record{}, recs[160:300]...), recs[160:300]...),
		nil,
	}
}

// appendAll appends every batch and returns the counts; between batches
// it calls between.
func appendAll(t *testing.T, s *Store, batches [][]audit.Record, between func()) []int {
	var got []int
	for _, b := range batches {
		n, err := s.AppendCalls(t.Context(), b)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
		between()
	}
	return got
}

// TestAckLog_CountsAsCommit: AppendCalls returns with ack "log" the counts
// it returns with "commit" for the same appends, whether the calls before
// are committed already or still in the log.
func TestAckLog_CountsAsCommit(t *testing.T) {
	batches := countBatches(t)
	ref := openTemp(t, Options{})
	defer ref.Close()
	want := appendAll(t, ref, batches, func() {})
	if want[0] != 100 || want[1] != 50 || want[3] != 0 || want[4] != 20 {
		t.Fatalf("commit counts %v: the batches do not test what they should", want)
	}
	stored := count(t, ref)

	t.Run("committed_between", func(t *testing.T) {
		s := openTemp(t, Options{Ack: AckLog})
		defer s.Close()
		got := appendAll(t, s, batches, func() {
			if err := s.caughtUp(t.Context(), "test"); err != nil {
				t.Fatal(err)
			}
		})
		if !equalInts(got, want) {
			t.Errorf("counts %v, want %v (ack commit)", got, want)
		}
		if n := count(t, s); n != stored {
			t.Errorf("%d calls stored, want %d", n, stored)
		}
	})
	t.Run("pending", func(t *testing.T) {
		s := openTemp(t, Options{Ack: AckLog})
		defer s.Close()
		s.clog.gate.Lock() // nothing committed until every batch is counted
		got := appendAll(t, s, batches, func() {})
		if n, _ := s.LogUsage(); n != len(batches)-1 {
			t.Errorf("%d frames in the log, want %d: the drain was not held", n, len(batches)-1)
		}
		s.clog.gate.Unlock()
		if !equalInts(got, want) {
			t.Errorf("counts %v, want %v (ack commit)", got, want)
		}
		if n := count(t, s); n != stored {
			t.Errorf("%d calls stored, want %d", n, stored)
		}
	})
	t.Run("no_id_index", func(t *testing.T) {
		// Another store on the file holds the id index: stored keys are
		// looked up in calls_key one by one.
		path := filepath.Join(t.TempDir(), "audit.db")
		holder, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		s, err := Open(path, Options{Ack: AckLog})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if s.ids != nil && !s.ids.dead.Load() {
			t.Fatal("the second store has the id index")
		}
		got := appendAll(t, s, batches, func() {
			if err := s.caughtUp(t.Context(), "test"); err != nil {
				t.Fatal(err)
			}
		})
		if !equalInts(got, want) {
			t.Errorf("counts %v, want %v (ack commit)", got, want)
		}
	})
	t.Run("reopened_between", func(t *testing.T) {
		// Each Open moves the floor of the recent keys to the last
		// stored call: the older calls after it are looked up.
		path := filepath.Join(t.TempDir(), "audit.db")
		var got []int
		for _, b := range batches {
			s, err := Open(path, Options{Ack: AckLog})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, appendAll(t, s, [][]audit.Record{b}, func() {})...)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if !equalInts(got, want) {
			t.Errorf("counts %v, want %v (ack commit)", got, want)
		}
	})
	t.Run("few_recent_keys", func(t *testing.T) {
		// The recent keys pruned again and again: the floor moves
		// within the batches.
		old := maxRecent
		maxRecent = 16
		defer func() { maxRecent = old }()
		s := openTemp(t, Options{Ack: AckLog})
		defer s.Close()
		got := appendAll(t, s, batches, func() {
			if err := s.caughtUp(t.Context(), "test"); err != nil {
				t.Fatal(err)
			}
		})
		if !equalInts(got, want) {
			t.Errorf("counts %v, want %v (ack commit)", got, want)
		}
		if s.clog.recent.floor == math.MinInt64 {
			t.Error("the floor never moved")
		}
	})
	t.Run("after_retention", func(t *testing.T) {
		recs := records(t, 100)
		cut := recs[50].Call.Time
		run := func(s *Store) []int {
			var got []int
			got = append(got, appendAll(t, s, [][]audit.Record{recs}, func() {
				if err := s.caughtUp(t.Context(), "test"); err != nil {
					t.Fatal(err)
				}
			})...)
			if _, err := s.DeleteBefore(t.Context(), cut); err != nil {
				t.Fatal(err)
			}
			return append(got, appendAll(t, s, [][]audit.Record{recs}, func() {})...)
		}
		ref := openTemp(t, Options{})
		defer ref.Close()
		s := openTemp(t, Options{Ack: AckLog})
		defer s.Close()
		want, got := run(ref), run(s)
		if want[1] == 0 || !equalInts(got, want) {
			t.Errorf("counts %v, want %v (ack commit), the second not 0", got, want)
		}
	})
	t.Run("half_committed", func(t *testing.T) {
		s := openTemp(t, Options{Ack: AckLog})
		defer s.Close()
		i := 0
		got := appendAll(t, s, batches, func() {
			if i++; i%2 == 0 {
				if err := s.caughtUp(t.Context(), "test"); err != nil {
					t.Fatal(err)
				}
			}
		})
		if !equalInts(got, want) {
			t.Errorf("counts %v, want %v (ack commit)", got, want)
		}
	})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// crashCopy copies the store's files (file, SQLite's log, the call log;
// not the id index, which is rebuilt) to a new directory, as a crash
// would leave them while nothing is being written: the drain is held.
func crashCopy(t *testing.T, path string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "audit.db")
	for _, suffix := range []string{"", "-wal"} {
		copyFile(t, path+suffix, dst+suffix)
	}
	ents, err := os.ReadDir(LogDir(path))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(LogDir(dst), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), spool.SegExt) {
			copyFile(t, filepath.Join(LogDir(path), e.Name()), filepath.Join(LogDir(dst), e.Name()))
		}
	}
	return dst
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
}

// ids returns every stored call's id with its number of copies.
func storedIDs(t *testing.T, s *Store) map[string]int {
	t.Helper()
	seen := map[string]int{}
	if err := s.ScanCalls(t.Context(), time.Time{}, func(r *audit.Record) error {
		seen[r.Call.Tenant+"/"+r.Call.ID]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return seen
}

// TestAckLog_Replay: what a crash leaves in the call log (acknowledged,
// never committed) is committed by the next Open, before it returns; a
// frame committed before the crash but not yet removed from the log is
// applied again, and stores nothing twice. The crash is the store's files
// copied while the drain is held (at the two points); the kill of a real
// serve is TestServe_KillLoopAckLog.
func TestAckLog_Replay(t *testing.T) {
	recs := records(t, 400)
	for _, tc := range []struct {
		name string
		// hold stops the drain where the crash comes and returns what
		// lets it go on.
		hold func(s *Store) (release func())
	}{
		{"never_committed", func(s *Store) func() {
			s.clog.gate.Lock()
			return s.clog.gate.Unlock
		}},
		{"committed_not_removed", func(s *Store) func() {
			stopped, goOn := make(chan struct{}), make(chan struct{})
			s.clog.committed = func() {
				select {
				case <-stopped:
				default:
					close(stopped)
					<-goOn
				}
			}
			return func() { close(goOn) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.db")
			s, err := Open(path, Options{Ack: AckLog})
			if err != nil {
				t.Fatal(err)
			}
			release := tc.hold(s)
			acked := map[string]int{}
			for i := 0; i < len(recs); i += 50 {
				if _, err := s.AppendCalls(t.Context(), recs[i:i+50]); err != nil {
					t.Fatal(err)
				}
				for _, r := range recs[i : i+50] {
					acked[r.Call.Tenant+"/"+r.Call.ID] = 1
				}
			}
			if tc.name == "committed_not_removed" {
				// Wait until the drain stops after its commit.
				for deadline := time.Now().Add(hangCeiling); ; time.Sleep(10 * time.Millisecond) {
					if _, err := os.Stat(path + "-wal"); err == nil && committedCalls(t, path) > 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the drain committed nothing")
					}
				}
			}
			crashed := crashCopy(t, path)
			release()
			s.Close()
			if n, _ := spoolFrames(t, LogDir(crashed)); n == 0 {
				t.Fatal("the crashed copy has no frames in its call log")
			}
			before := committedCalls(t, crashed)
			if tc.name == "committed_not_removed" && before == 0 {
				t.Fatal("the crash copy holds no committed call")
			}
			// Reopened with ack "commit": the log is applied all the same.
			re, err := Open(crashed, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer re.Close()
			got := storedIDs(t, re)
			for id, n := range got {
				if n != 1 {
					t.Errorf("call %s stored %d times", id, n)
				}
			}
			if len(got) != len(acked) {
				t.Errorf("%d calls stored after the restart (%d before it applied the log), want the %d acknowledged", len(got), before, len(acked))
			}
			if n, _ := spoolFrames(t, LogDir(crashed)); n != 0 {
				t.Errorf("%d segments left in the call log after it was applied", n)
			}
		})
	}
}

// committedCalls counts the calls in the file at path, read behind the
// store's back.
func committedCalls(t *testing.T, path string) int {
	t.Helper()
	var n int
	if err := side(t, path).QueryRow(`SELECT count(*) FROM calls`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// spoolFrames counts the segments in dir and their bytes.
func spoolFrames(t *testing.T, dir string) (segs int, size int64) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), spool.SegExt) {
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			if info.Size() > 0 {
				segs++
				size += info.Size()
			}
		}
	}
	return segs, size
}

// TestAckLog_Full: an append that would pass log_max_bytes is refused as
// the ClickHouse store refuses one past its spool's limit (unavailable,
// spool full), nothing of it counted; every append acknowledged before is
// stored once the drain goes on.
func TestAckLog_Full(t *testing.T) {
	s := openTemp(t, Options{Ack: AckLog, LogMaxBytes: 64 << 10})
	defer s.Close()
	recs := records(t, 2000)
	s.clog.gate.Lock()
	acked := 0
	var refused error
	for i := 0; i < len(recs); i += 20 {
		n, err := s.AppendCalls(t.Context(), recs[i:i+20])
		if err != nil {
			refused = err
			if n != 0 {
				t.Errorf("a refused append counted %d calls", n)
			}
			break
		}
		acked += 20
	}
	if refused == nil {
		t.Fatal("2000 calls fit a call log of 64 KiB")
	}
	if !errors.Is(refused, audit.ErrUnavailable) || !errors.Is(refused, spool.ErrFull) ||
		!strings.Contains(refused.Error(), "cannot append calls: cannot spool") || !strings.Contains(refused.Error(), "of 65536 used, serve.sqlite.log_max_bytes): spool full") {
		t.Errorf("refusal %q: want unavailable, spool full, with the sizes", refused)
	}
	s.clog.gate.Unlock()
	if n := count(t, s); n != acked {
		t.Errorf("%d calls stored, want the %d acknowledged", n, acked)
	}
	// Room again once drained.
	if _, err := s.AppendCalls(t.Context(), recs[acked:acked+20]); err != nil {
		t.Errorf("after the drain: %v", err)
	}
}

// TestAckLog_TooLarge: one request larger than the whole call log is
// refused for good (audit.ErrTooLarge, not unavailable: waiting for the
// drain never makes room for it), naming the setting and both sizes; the
// log stays empty and a request that fits is taken after it.
func TestAckLog_TooLarge(t *testing.T) {
	s := openTemp(t, Options{Ack: AckLog, LogMaxBytes: 64 << 10})
	defer s.Close()
	recs := records(t, 2000)
	n, err := s.AppendCalls(t.Context(), recs)
	if n != 0 || !errors.Is(err, audit.ErrTooLarge) || errors.Is(err, audit.ErrUnavailable) {
		t.Fatalf("append of 2000 calls to a call log of 64 KiB: %d, %v; want ErrTooLarge only", n, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "more than the spool's limit of 65536") ||
		!strings.Contains(msg, "serve.sqlite.log_max_bytes") || !strings.Contains(msg, "cannot spool a batch of ") {
		t.Errorf("refusal %q: want the setting and both sizes", msg)
	}
	if frames, _ := s.clog.l.Usage(); frames != 0 {
		t.Errorf("%d frames in the call log after the refusal", frames)
	}
	if _, err := s.AppendCalls(t.Context(), recs[:20]); err != nil {
		t.Errorf("a request that fits, after the refusal: %v", err)
	}
	if got := count(t, s); got != 20 {
		t.Errorf("%d calls stored, want 20", got)
	}
}

// TestAckLog_ReadersWait: a query returns the calls acknowledged before it
// started, waiting for the drain; past log_wait it fails, unavailable,
// saying why.
func TestAckLog_ReadersWait(t *testing.T) {
	s := openTemp(t, Options{Ack: AckLog, LogWait: 300 * time.Millisecond})
	defer s.Close()
	recs := records(t, 100)
	s.clog.gate.Lock()
	if _, err := s.AppendCalls(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
	_, err := s.Calls(t.Context(), audit.CallQuery{})
	if !errors.Is(err, audit.ErrUnavailable) || !strings.Contains(err.Error(), "not yet committed after 300ms") {
		t.Errorf("a query with the drain held: %v, want unavailable after log_wait", err)
	}
	// The drain did not fail: the error says so, instead of "<nil>".
	if err != nil && (strings.Contains(err.Error(), "<nil>") || !strings.Contains(err.Error(), "the drain has not failed")) {
		t.Errorf("a query with the drain held, not failed: %v", err)
	}
	done := make(chan audit.CallPage, 1)
	go func() {
		p, err := s.Calls(context.Background(), audit.CallQuery{Limit: 1000})
		if err != nil {
			t.Error(err)
		}
		done <- p
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("the query returned before the drain went on")
	default:
	}
	s.clog.gate.Unlock()
	if p := <-done; len(p.Calls) != len(recs) {
		t.Errorf("the query saw %d calls, want the %d acknowledged before it", len(p.Calls), len(recs))
	}
}

// TestAckLog_CommandWhileServed: a second store opened on the same file
// while the first holds the call log (a command beside serve) does not
// take the log, and reads what the first committed.
func TestAckLog_CommandWhileServed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{Ack: AckLog})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := records(t, 50)
	if _, err := s.AppendCalls(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
	if err := s.caughtUp(t.Context(), "test"); err != nil {
		t.Fatal(err)
	}
	cmd, err := Open(path, NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.Close()
	if cmd.clog != nil {
		t.Error("the command took the call log serve holds")
	}
	if n := count(t, cmd); n != len(recs) {
		t.Errorf("the command reads %d calls, want %d", n, len(recs))
	}
	if _, err := Open(path, Options{Ack: AckLog}); err == nil || !strings.Contains(err.Error(), "cannot lock the call log") {
		t.Errorf("a second store with ack log: %v, want the log refused", err)
	}
}

// TestAckLog_Backlog: an append waits while maxBacklog calls are
// acknowledged and not committed, and goes on once the drain commits
// them; a drain held past log_wait, without failing, refuses it as
// overloaded (back-pressure, 429: the drain is behind the load), not
// unavailable (503, the store down, which pages; adv48 found a flood
// counted so).
func TestAckLog_Backlog(t *testing.T) {
	old := maxBacklog
	maxBacklog = 100
	defer func() { maxBacklog = old }()
	// log_wait is long enough for the last append, which waits from before
	// the drain goes on, to outlast a commit of 100 calls on a loaded
	// machine (300 ms failed so at load 18, review rev19b).
	s := openTemp(t, Options{Ack: AckLog, LogWait: 3 * time.Second})
	defer s.Close()
	recs := records(t, 300)
	s.clog.gate.Lock()
	if _, err := s.AppendCalls(t.Context(), recs[:100]); err != nil {
		t.Fatal(err)
	}
	_, err := s.AppendCalls(t.Context(), recs[100:200])
	if !errors.Is(err, audit.ErrOverloaded) || errors.Is(err, audit.ErrUnavailable) ||
		!strings.Contains(err.Error(), "100 calls acknowledged from the call log are not committed after 3s (serve.sqlite.log_wait): the drain into SQLite is behind the load") {
		t.Errorf("an append past the backlog with the drain held: %v; want it overloaded, not unavailable", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.AppendCalls(context.Background(), recs[200:300])
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the append returned (%v) before the drain went on", err)
	default:
	}
	s.clog.gate.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := count(t, s); n != 200 {
		t.Errorf("%d calls stored, want the 200 acknowledged", n)
	}
}

// TestAckLog_BacklogDrainFailingIsUnavailable: an append refused after
// log_wait while the drain's last commit failed is the store down,
// audit.ErrUnavailable (503, store_unavailable), the drain's error named;
// a drain only behind the load is overloaded (TestAckLog_Backlog).
func TestAckLog_BacklogDrainFailingIsUnavailable(t *testing.T) {
	old := maxBacklog
	maxBacklog = 100
	defer func() { maxBacklog = old }()
	s := openTemp(t, Options{Ack: AckLog, LogWait: 2 * time.Second})
	defer s.Close()
	recs := records(t, 200)
	s.clog.gate.Lock()
	defer s.clog.gate.Unlock()
	if _, err := s.AppendCalls(t.Context(), recs[:100]); err != nil {
		t.Fatal(err)
	}
	// The drain's failure, as drainOnce signals it: a real commit that
	// fails while the gate holds the drain cannot be made from a test.
	s.signalProgress(errors.New("disk I/O error"))
	_, err := s.AppendCalls(t.Context(), recs[100:200])
	if !errors.Is(err, audit.ErrUnavailable) || errors.Is(err, audit.ErrOverloaded) ||
		!strings.Contains(err.Error(), "100 calls acknowledged from the call log are not committed after 2s (the drain: disk I/O error)") {
		t.Fatalf("an append past the backlog with the drain failing: %v; want it unavailable, the drain's error named", err)
	}
}

// TestAckLog_Gather: the drain waits for more frames before it commits,
// so that the frames of one sequential sender share a transaction; a
// query, and Close, do not wait for the gathering to end.
func TestAckLog_Gather(t *testing.T) {
	recs := records(t, 60)
	t.Run("frames_share_a_transaction", func(t *testing.T) {
		defer func(w time.Duration, n int) { gatherWait, drainGather = w, n }(gatherWait, drainGather)
		gatherWait, drainGather = time.Hour, 30
		var mu sync.Mutex
		var commits []int
		s := openTemp(t, Options{Ack: AckLog, OnCommit: func(_ time.Duration, calls int) {
			mu.Lock()
			commits = append(commits, calls)
			mu.Unlock()
		}})
		defer s.Close()
		// One sender: each frame acknowledged before the next is sent,
		// with time for the drain to take it alone.
		for i := 0; i < 30; i += 10 {
			if _, err := s.AppendCalls(t.Context(), recs[i:i+10]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(30 * time.Millisecond)
		}
		if n := count(t, s); n != 30 {
			t.Fatalf("%d calls stored, want 30", n)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(commits) != 1 || commits[0] != 30 {
			t.Errorf("the drain committed %v calls a transaction, want the three frames in one: [30]", commits)
		}
	})
	t.Run("query_and_close_hurry", func(t *testing.T) {
		defer func(w time.Duration, n int) { gatherWait, drainGather = w, n }(gatherWait, drainGather)
		gatherWait, drainGather = time.Hour, 1<<20
		path := filepath.Join(t.TempDir(), "audit.db")
		s, err := Open(path, Options{Ack: AckLog, LogWait: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.AppendCalls(t.Context(), recs[:10]); err != nil {
			t.Fatal(err)
		}
		if n := count(t, s); n != 10 {
			t.Errorf("a query reads %d calls, want the 10 acknowledged", n)
		}
		if _, err := s.AppendCalls(t.Context(), recs[10:20]); err != nil {
			t.Fatal(err)
		}
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(hangCeiling): // far below gatherWait's hour
			t.Fatal("Close waits for the drain's gathering")
		}
		if frames, _ := s.LogUsage(); frames != 0 {
			t.Errorf("%d frames left in the call log after Close, want it drained", frames)
		}
	})
}
