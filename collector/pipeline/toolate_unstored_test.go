package pipeline_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// refusingStore refuses every Commit while refuse is set (the store
// cannot answer); everything else goes through.
type refusingStore struct {
	audit.Store
	refuse atomic.Bool
}

func (s *refusingStore) Commit(ctx context.Context, r audit.Results) error {
	if s.refuse.Load() {
		return fmt.Errorf("refused: %w", audit.ErrUnavailable)
	}
	return s.Store.Commit(ctx, r)
}

// AppendCallsCompared passes the store's comparison on: the pipeline names
// calls too late only for a store that tells which calls it held.
func (s *refusingStore) AppendCallsCompared(ctx context.Context, calls []audit.Record) (int, []int, []int, error) {
	return s.Store.(audit.ResponseComparer).AppendCallsCompared(ctx, calls)
}

// TestStatus_UnstoredCountsTooLate (rev15a): while the store refuses
// commits, a call counted too late is named by the status' unstored count
// (judged is false until it is stored), and nothing else is; once the
// store answers again, the name is stored (TooLateCalls reads it) and the
// count is back to zero.
func TestStatus_UnstoredCountsTooLate(t *testing.T) {
	dir := t.TempDir()
	st := openSQLite(t, dir)
	rs := &refusingStore{Store: st}
	clock := newClock(wallStart)
	p := openPipeline(t, dir, rs, clock)
	ingest := func(b audit.Batch) {
		t.Helper()
		if _, err := p.Ingest(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		p.Status()
	}
	rpc := 0
	for range 200 {
		rpc++
		ingest(batch(t, "pod-0", callLine("thegram", "s0", rpc, clock.Now().Add(-time.Second))))
		clock.Add(time.Second)
	}
	if _, _, n := p.Report(); n != 0 {
		t.Fatalf("%d unstored before the store refuses", n)
	}
	rs.refuse.Store(true)
	late := batch(t, "pod-0", callLine("thegram", "s-late", 9000, clock.Now().Add(-3*time.Minute)))
	lateID := ids(late)[0]
	ingest(late)
	parts, _, n := p.Report()
	if len(parts) != 1 || parts[0].TooLate != 1 {
		t.Fatalf("status %+v, want one partition with the call too late", parts)
	}
	if n != 1 {
		t.Errorf("%d unstored while the store refuses the name of the call too late, want 1", n)
	}
	rs.refuse.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, _, n = p.Report(); n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n != 0 {
		t.Errorf("%d unstored after the store answers again, want 0", n)
	}
	refs, err := st.TooLateCalls(context.Background(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 || refs[0].ID != lateID {
		t.Errorf("calls too late stored %v, want %s", refs, lateID)
	}
}

// plainStore hides the store's comparison of responses: a store that
// cannot tell which calls of a request it held already (the ClickHouse
// store counts every call as new).
type plainStore struct{ audit.Store }

// TestTooLate_NotNamedWhenTheStoreCannotTell: with a store that does not
// say which calls it held, any call may be a copy sent again of one judged
// in time, so a call counted too late is not named: the replay judges it
// as before stores named any (TestRestart_TooLateResentNotSkippedWhenJudged
// shows what naming a held call costs). It is still counted too late.
func TestTooLate_NotNamedWhenTheStoreCannotTell(t *testing.T) {
	for _, tell := range []bool{false, true} {
		t.Run(fmt.Sprintf("tells=%v", tell), func(t *testing.T) {
			dir := t.TempDir()
			st := openSQLite(t, dir)
			var s audit.Store = plainStore{st}
			if tell {
				s = &refusingStore{Store: st}
			}
			clock := newClock(wallStart)
			p := openPipeline(t, dir, s, clock)
			for rpc := range 200 {
				if _, err := p.Ingest(context.Background(), batch(t, "pod-0", callLine("thegram", "s0", rpc+1, clock.Now().Add(-time.Second)))); err != nil {
					t.Fatal(err)
				}
				p.Status()
				clock.Add(time.Second)
			}
			late := batch(t, "pod-0", callLine("thegram", "s-late", 9000, clock.Now().Add(-3*time.Minute)))
			if _, err := p.Ingest(context.Background(), late); err != nil {
				t.Fatal(err)
			}
			p.Status()
			parts, _, _ := p.Report()
			if len(parts) != 1 || parts[0].TooLate != 1 {
				t.Fatalf("status %+v, want one partition with the call too late", parts)
			}
			if err := p.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			refs, err := st.TooLateCalls(context.Background(), time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{false: 0, true: 1}[tell]; len(refs) != want {
				t.Errorf("calls too late named %v, want %d", refs, want)
			}
		})
	}
}

// openSQLite opens an embedded store in dir, closed when the test ends.
func openSQLite(t *testing.T, dir string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.Options{Synchronous: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// openPipeline starts a pipeline over s with its state file in dir, on
// clock, committing every 10 ms; closed when the test ends (before the
// store: cleanups run last first).
func openPipeline(t *testing.T, dir string, s audit.Store, clock *testClock) *pipeline.Pipeline {
	t.Helper()
	cfg := pipeline.NewDefaultConfig()
	cfg.StateFile = filepath.Join(dir, "partitions.json")
	cfg.Now = clock.Now
	cfg.CommitEvery = 10 * time.Millisecond
	dcfg := detect.NewDefaultConfig()
	dcfg.JoinWait = 2 * time.Second
	p, err := pipeline.New(context.Background(), cfg, dcfg, s, slog.New(slog.NewTextHandler(io.Discard, nil)), newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}
