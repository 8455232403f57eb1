package calllog

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// clock is a clock the test moves (Options.Now).
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// sealedCount returns how many segments l holds sealed.
func sealedCount(l *Log) int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.sealed)
}

// waitSealed waits for l to hold n sealed segments (the age timer seals in
// the committer); it fails after a minute.
func waitSealed(t *testing.T, l *Log, n int, what string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for sealedCount(l) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d segments sealed after a minute; want %d", what, sealedCount(l), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAgeSeal_AcrossReopens (seal52): a log opened again more often than
// its segment age still seals by age, and retention can then remove the
// calls. Until seal52 the age of a recovered live segment counted from
// each open, so a serve restarted more often than hourly never sealed a
// quiet tenant's live segment, and retention (sealed segments alone) kept
// its calls until it reached 64 MiB. The call times are old (storetest.T0):
// the age is the segment's, not its calls'.
func TestAgeSeal_AcrossReopens(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)}
	opts := Options{SegmentAge: time.Hour, Now: c.Now}
	recs := gen(t, 5201, 400)
	for i := 0; i < 3; i++ { // opens at 0, 25 and 50 minutes
		l := open(t, dir, opts)
		appendAll(t, l, recs[i*100:(i+1)*100])
		if n := sealedCount(l); n != 0 {
			t.Fatalf("open %d, %v after the segment's creation: %d segments sealed, want 0", i+1, time.Duration(i)*25*time.Minute, n)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		c.advance(25 * time.Minute)
	}
	// At 75 minutes: sealed, by the timer the committer arms at its start
	// or by the commit of this append, whichever comes first.
	l := open(t, dir, opts)
	defer l.Close()
	appendAll(t, l, recs[300:])
	if n := sealedCount(l); n != 1 {
		t.Fatalf("opened 75 minutes after the live segment's creation, an hour its age: %d segments sealed, want 1", n)
	}
	if _, err := os.Stat(idxPath(l.segPath(1))); err != nil {
		t.Fatalf("the segment sealed by age has no index: %v", err)
	}
	sameSet(t, "after the seal", scanAll(t, l, time.Time{}, time.Time{}), sortedIDs(recs))
	// Retention now removes what was sealed (the calls are all before the
	// cut).
	gone, err := l.DeleteBefore(recs[len(recs)-1].Call.Time.Add(time.Hour))
	if err != nil || gone < 300 {
		t.Fatalf("retention after the seal removed %d calls (%v); want the sealed segment's, at least 300", gone, err)
	}
}

// TestAgeSeal_AtOpen (seal52): a live segment past its age when the log is
// opened is sealed soon after, with no append; one written before seal52
// (no creation time in its header) is too when it holds a block, its age
// being unknown.
func TestAgeSeal_AtOpen(t *testing.T) {
	t.Run("past_its_age", func(t *testing.T) {
		dir := t.TempDir()
		c := &clock{now: time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)}
		opts := Options{SegmentAge: time.Hour, Now: c.Now}
		l := open(t, dir, opts)
		appendAll(t, l, gen(t, 5202, 100))
		l.Close()
		c.advance(61 * time.Minute)
		l = open(t, dir, opts)
		defer l.Close()
		waitSealed(t, l, 1, "opened past the live segment's age")
	})
	t.Run("header_before_seal52", func(t *testing.T) {
		dir := t.TempDir()
		opts := Options{SegmentAge: time.Hour}
		recs := gen(t, 5203, 100)
		l := open(t, dir, opts)
		appendAll(t, l, recs)
		l.Close()
		// The same blocks behind the header of a release before seal52.
		p := filepath.Join(dir, SegmentName(1))
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, append([]byte(segMagic), b[segHeadLen:]...), 0o600); err != nil {
			t.Fatal(err)
		}
		l = open(t, dir, opts)
		defer l.Close()
		sameSet(t, "a segment of a release before seal52", scanAll(t, l, time.Time{}, time.Time{}), sortedIDs(recs))
		waitSealed(t, l, 1, "a live segment of unknown age holding a block")
	})
}

// dirFiles lists the files of dir with their size and SHA-256.
func dirFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %d %x", e.Name(), len(b), sha256.Sum256(b)))
	}
	return out
}

// TestDefer (seal52): an Open with Defer changes no file (a torn tail, a
// damaged index to write again, a lone index, a temporary file, a live
// segment to create), reads what Start will keep, refuses appends and
// retention; Close leaves the files as found; Start makes the repairs.
func TestDefer(t *testing.T) {
	dir := t.TempDir()
	recs := gen(t, 5204, 300)
	l := open(t, dir, Options{SegmentBytes: 1})
	appendAll(t, l, recs[:100]) // sealed: segment 1
	appendAll(t, l, recs[100:200])
	l.Close() // segment 2 sealed, 3 live and empty
	l = open(t, dir, Options{})
	appendAll(t, l, recs[200:])
	l.Close()
	live := filepath.Join(dir, SegmentName(3))
	fi, err := os.Stat(live)
	if err != nil {
		t.Fatal(err)
	}
	// A torn tail, segment 2's index damaged, a lone index and a
	// temporary file.
	f, _ := os.OpenFile(live, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte("CLB1torn"))
	f.Close()
	if err := os.WriteFile(idxPath(filepath.Join(dir, SegmentName(2))), []byte("damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, SegmentName(9)[:segNameDigits]+idxExt), []byte("lone"), 0o600)
	os.WriteFile(filepath.Join(dir, "x"+tmpExt), []byte("tmp"), 0o600)
	before := dirFiles(t, dir)

	var torn []int64
	opts := Options{Defer: true, OnTornTail: func(_ string, at, n int64) { torn = append(torn, at, n) }}
	l = open(t, dir, opts)
	sameSet(t, "deferred", scanAll(t, l, time.Time{}, time.Time{}), sortedIDs(recs))
	if _, err := l.Append(t.Context(), gen(t, 5205, 1)); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Append before Start: %v; want ErrNotStarted", err)
	}
	if _, err := l.DeleteBefore(time.Now()); !errors.Is(err, ErrNotStarted) {
		t.Errorf("DeleteBefore before Start: %v; want ErrNotStarted", err)
	}
	if after := dirFiles(t, dir); !slices.Equal(before, after) {
		t.Errorf("a deferred open changed the files:\nbefore %q\nafter  %q", before, after)
	}
	if len(torn) != 0 {
		t.Errorf("a deferred open said it cut a torn tail: %v", torn)
	}
	l.Close()
	if after := dirFiles(t, dir); !slices.Equal(before, after) {
		t.Errorf("Close of a deferred open changed the files:\nbefore %q\nafter  %q", before, after)
	}

	l = open(t, dir, opts)
	defer l.Close()
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(torn, []int64{fi.Size(), 8}) {
		t.Errorf("torn tail said: %v; want 8 bytes at %d", torn, fi.Size())
	}
	if now, err := os.Stat(live); err != nil || now.Size() != fi.Size() {
		t.Errorf("Start did not cut the torn tail: %v %v", now, err)
	}
	for _, name := range []string{SegmentName(9)[:segNameDigits] + idxExt, "x" + tmpExt} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Start left %s: %v", name, err)
		}
	}
	if _, why, err := readIndexHead(idxPath(filepath.Join(dir, SegmentName(2))), make([]byte, 1<<20)); err != nil || why != "" {
		t.Errorf("Start did not write segment 2's index again: %v %s", err, why)
	}
	more := genAt(t, 5206, storetest.T0.Add(time.Hour), 10)
	if held := appendAll(t, l, more); len(held) != 0 {
		t.Errorf("held %v of new calls after Start", held)
	}
	sameSet(t, "after Start", scanAll(t, l, time.Time{}, time.Time{}), sortedIDs(append(slices.Clone(recs), more...)))
}
