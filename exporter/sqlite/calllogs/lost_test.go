package calllogs_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
)

// TestOpen_LiveSegmentDamage: what the store's open does with a live
// segment that lost bytes. A torn tail (a block written whose sync never
// returned, never chained) is cut, said (OnTornTail), and the store opens
// with every call. Blocks the chain records as synced and the files lack
// (the live segment cut short, at a block or inside one, or removed; a
// sealed segment cut at a block) refuse the open, naming the tenant, the
// file, the blocks and the calls. Until fd52 each of these opened with
// fewer calls and said nothing (adv51); verify reported it later.
func TestOpen_LiveSegmentDamage(t *testing.T) {
	c := newChained(t)
	recs := gen(t, 52).Records(405)
	slices.SortFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	c.write(t, recs)
	live := func(t *testing.T, dir string) string {
		segs := segments(t, dir)
		p := segs[len(segs)-1]
		if fi, err := os.Stat(p); err != nil || fi.Size() < 1000 {
			t.Fatalf("the live segment %s holds no block to lose (%v)", p, err)
		}
		return p
	}
	type cut struct {
		path    string
		at, len int64
	}
	openDir := func(t *testing.T, dir string) (*sqlite.Store, *calllogs.Logs, []cut, error) {
		t.Helper()
		var cuts []cut
		opts := c.opts
		opts.OnTornTail = func(path string, at, n int64) { cuts = append(cuts, cut{path, at, n}) }
		logs, err := calllogs.Open(calllogs.Dir(dir), opts)
		if err != nil {
			return nil, nil, nil, err
		}
		st, err := sqlite.Open(filepath.Join(dir, "audit.db"), sqlite.Options{Calls: sqlite.CallsLog, CallLog: logs, SigningKey: c.key})
		if err != nil {
			logs.Close()
			return nil, nil, cuts, err
		}
		return st, logs, cuts, nil
	}
	refused := func(t *testing.T, dir, file string) {
		t.Helper()
		st, _, _, err := openDir(t, dir)
		if err == nil {
			st.Close()
			t.Fatalf("the store opened on a call log that lost synced blocks of %s", filepath.Base(file))
		}
		var lost *sqlite.LostBlocksError
		if !errors.Is(err, sqlite.ErrCallsLost) || !errors.As(err, &lost) {
			t.Fatalf("open on a call log that lost synced blocks: %v; want ErrCallsLost", err)
		}
		if msg := err.Error(); !strings.Contains(msg, `tenant ""`) || !strings.Contains(msg, filepath.Base(file)) ||
			!strings.Contains(msg, "calls in all") || !strings.Contains(msg, "mcpaudit restore") {
			t.Errorf("the refusal does not name the tenant, the file, the calls and what to do: %v", err)
		}
		var calls int64
		for _, g := range lost.Segments {
			calls += g.Calls
		}
		if calls == 0 {
			t.Errorf("the refusal counts no call lost: %+v", lost.Segments)
		}
		t.Logf("refused: %v", err)
	}

	t.Run("torn_tail_accepted", func(t *testing.T) {
		dir := c.copyDir(t)
		p := live(t, dir)
		before, _ := os.Stat(p)
		// A block's header whose body never reached the disk.
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write(append([]byte("CLB1"), bytes.Repeat([]byte{7}, 50)...))
		f.Close()
		st, logs, cuts, err := openDir(t, dir)
		if err != nil {
			t.Fatalf("open after a torn tail: %v", err)
		}
		defer st.Close()
		if len(cuts) != 1 || cuts[0].path != p || cuts[0].at != before.Size() || cuts[0].len != 54 {
			t.Errorf("torn tail cuts said: %+v; want one of 54 bytes at %d of %s", cuts, before.Size(), p)
		}
		if s, err := logs.Stats(); err != nil || s.Calls != int64(len(recs)) {
			t.Errorf("calls after a torn tail: %+v, %v; want %d", s, err, len(recs))
		}
	})
	t.Run("live_segment_cut_inside_a_block", func(t *testing.T) {
		dir := c.copyDir(t)
		p := live(t, dir)
		fi, _ := os.Stat(p)
		if err := os.Truncate(p, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, p)
	})
	t.Run("live_segment_cut_at_a_block", func(t *testing.T) {
		dir := c.copyDir(t)
		p := live(t, dir)
		b, _ := os.ReadFile(p)
		at := bytes.LastIndex(b, []byte("CLB1"))
		if at <= 8 {
			t.Fatalf("one block in %s", p)
		}
		if err := os.Truncate(p, int64(at)); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, p)
	})
	t.Run("live_segment_removed", func(t *testing.T) {
		dir := c.copyDir(t)
		p := live(t, dir)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		refused(t, dir, p)
	})
	t.Run("sealed_segment_cut_at_a_block", func(t *testing.T) {
		dir := c.copyDir(t)
		p := segments(t, dir)[0]
		b, _ := os.ReadFile(p)
		at := bytes.LastIndex(b, []byte("CLB1"))
		if err := os.Truncate(p, int64(at)); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := openDir(t, dir)
		if !errors.Is(err, calllog.ErrCorrupt) || !strings.Contains(err.Error(), "blocks synced and indexed are missing") {
			t.Fatalf("open with a sealed segment cut at a block: %v; want ErrCorrupt naming the blocks missing", err)
		}
		t.Logf("refused: %v", err)
	})
}

// TestOpen_LostLastSegmentBeforeCut (review52): a tenant whose sealed
// segments retention removed keeps its calls in its live segment, calls
// all before the chained cut (a quiet tenant: its live segment is sealed
// SegmentAge after the open; or calls sent late, with old times).
// Retention never removes a live segment, so that segment's file gone
// (removed, or the tenant's directory lost) is a loss of acknowledged
// calls: the open must refuse it. checkLost took it for retention's
// because its blocks are all before the cut, the log started again at
// segment 1, and the store opened; the chain still records the lost
// segment's blocks, whose places the new segments would take.
func TestOpen_LostLastSegmentBeforeCut(t *testing.T) {
	c := newChained(t)
	recs := gen(t, 521).Records(405)
	slices.SortFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	c.write(t, recs)
	// Retention at an hour past the last call: every sealed segment goes,
	// the live one stays, its calls all before the chained cut.
	c.retain(t, recs[len(recs)-1].Call.Time.Add(time.Hour))
	left, err := filepath.Glob(filepath.Join(calllogs.Dir(c.dir), "*", "*.seg"))
	if err != nil || len(left) != 1 {
		t.Fatalf("after retention: segments %v (%v); want the live one alone", left, err)
	}
	if fi, err := os.Stat(left[0]); err != nil || fi.Size() < 1000 {
		t.Fatalf("the live segment %s holds no block (%v)", left[0], err)
	}
	for _, tc := range []struct {
		name string
		lose func(dir, seg string) error
	}{
		{"live_segment_removed", func(dir, seg string) error { return os.Remove(seg) }},
		{"tenant_directory_removed", func(dir, seg string) error { return os.RemoveAll(filepath.Dir(seg)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := c.copyDir(t)
			seg := filepath.Join(dir, strings.TrimPrefix(left[0], c.dir))
			if err := tc.lose(dir, seg); err != nil {
				t.Fatal(err)
			}
			// verify, before any open writes a new segment.
			if ok, out := c.verify(t, dir); ok {
				t.Errorf("verify with the live segment %s, chained, gone: want TAMPERED:\n%s", filepath.Base(seg), out)
			}
			logs, err := calllogs.Open(calllogs.Dir(dir), c.opts)
			if err != nil {
				t.Fatal(err)
			}
			st, err := sqlite.Open(filepath.Join(dir, "audit.db"), sqlite.Options{Calls: sqlite.CallsLog, CallLog: logs, SigningKey: c.key})
			if err == nil {
				st.Close()
				t.Fatalf("the store opened on a call log whose live segment %s, chained, is gone", filepath.Base(seg))
			}
			logs.Close()
			if !errors.Is(err, sqlite.ErrCallsLost) || !strings.Contains(err.Error(), filepath.Base(seg)) {
				t.Fatalf("open with the live segment gone: %v; want ErrCallsLost naming %s", err, filepath.Base(seg))
			}
			t.Logf("refused: %v", err)
		})
	}
}

// retain runs one retention pass of c's store at cut.
func (c *chained) retain(t *testing.T, cut time.Time) {
	t.Helper()
	st := c.open(t, nil)
	defer st.Close()
	if _, err := st.DeleteBefore(context.Background(), cut); err != nil {
		t.Fatal(err)
	}
}
