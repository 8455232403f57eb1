package calllog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestFiles_ReadersAndRetention (run it with -race): readers scan and look
// calls up by id while retention removes segments and appends seal new
// ones, through a cache of two files: every scan gives, in order, every
// call not deleted when it began that it can see, and no error; every
// lookup finds its call or, once deleted, not; at the end no more files
// are open than the bound.
func TestFiles_ReadersAndRetention(t *testing.T) {
	files := NewFiles(2)
	l := open(t, t.TempDir(), Options{SegmentBytes: 1, Files: files})
	defer l.Close()
	const blocks, per = 40, 25
	recs := gen(t, 53, blocks*per)
	slices.SortStableFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	for i := 0; i < len(recs)/2; i += per {
		appendAll(t, l, recs[i:i+per])
	}
	ctx := context.Background()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		cut  time.Time // calls before it may be gone
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	stop := make(chan struct{})
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				from := cut
				mu.Unlock()
				seen := map[string]bool{}
				var last time.Time
				err := l.Scan(ctx, from, time.Time{}, func(r *audit.Record) error {
					if r.Call.Time.Before(last) {
						return fmt.Errorf("call at %s after one at %s", r.Call.Time, last)
					}
					last = r.Call.Time
					seen[r.Call.ID] = true
					return nil
				})
				if err != nil {
					fail(fmt.Errorf("Scan: %w", err))
					return
				}
				// Every call appended before the scan at or after its
				// start was seen (those of the first half at least).
				for i := range recs[:len(recs)/2] {
					if c := recs[i].Call; !c.Time.Before(from) && !seen[c.ID] {
						fail(fmt.Errorf("Scan from %s missed call %s at %s", from, c.ID, c.Time))
						return
					}
				}
				i := len(seen) % (len(recs) / 2)
				rec, ok, err := l.GetAt(ctx, recs[i].Call.ID, recs[i].Call.Time)
				if err != nil || ok && !same(rec, &recs[i]) {
					fail(fmt.Errorf("GetAt %s: %v, %v", recs[i].Call.ID, ok, err))
					return
				}
			}
		}()
	}
	for i := len(recs) / 2; i < len(recs); i += per {
		appendAll(t, l, recs[i:i+per])
		if i%(4*per) == 0 {
			c := recs[i-len(recs)/2].Call.Time
			mu.Lock()
			cut = c
			mu.Unlock()
			if _, err := l.DeleteBefore(c); err != nil {
				t.Fatalf("DeleteBefore: %v", err)
			}
		}
	}
	close(stop)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if st := files.Stats(); st.Open > st.Max {
		t.Errorf("%d sealed files open, bound %d", st.Open, st.Max)
	}
}

// TestFiles_ReadOnlyGone: a reader's log (read-only) whose sealed segment
// the writer's retention removed since the reader opened it, its file
// closed by the reader's cache: the read fails naming the segment
// (ErrNoSegment), never an answer without its calls.
func TestFiles_ReadOnlyGone(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir, Options{SegmentBytes: 1})
	defer w.Close()
	recs := gen(t, 54, 100)
	slices.SortStableFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	for i := 0; i < len(recs); i += 10 {
		appendAll(t, w, recs[i:i+10])
	}
	r := open(t, dir, Options{ReadOnly: true, Files: NewFiles(1)})
	defer r.Close()
	if _, err := w.DeleteBefore(recs[50].Call.Time); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := r.Scan(context.Background(), time.Time{}, time.Time{}, func(*audit.Record) error { n++; return nil })
	if !errors.Is(err, ErrNoSegment) {
		t.Fatalf("a reader's scan of segments removed since it opened: %d calls, %v; want ErrNoSegment", n, err)
	}
	t.Logf("the reader's error: %v", err)
}

// TestFiles_ReadOnlyNoLiveSegment: a reader's log whose directory holds no
// segment (or sealed ones alone) has an empty live segment of no file; it
// closes without a file to let go.
func TestFiles_ReadOnlyNoLiveSegment(t *testing.T) {
	l := open(t, t.TempDir(), Options{ReadOnly: true})
	if err := l.Close(); err != nil {
		t.Fatalf("Close of a reader's log with no segment: %v", err)
	}
}
