package spool

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// textCodec spools strings, for the tests of the log itself; the stores'
// codecs and their tests are in exporter/clickhouse and exporter/sqlite.
type textCodec struct{}

func (textCodec) Size(v string) int                  { return len(v) }
func (textCodec) Append(dst []byte, v string) []byte { return append(dst, v...) }
func (textCodec) Rows(v string) int                  { return 1 }
func (textCodec) Decode(raw []byte) (string, error) {
	if strings.HasPrefix(string(raw), "bad") {
		return "", &CorruptError{InBatch: true, Reason: "bad"}
	}
	return string(raw), nil
}
func (textCodec) DecodeLegacy(data []byte) (string, error) {
	return "", &CorruptError{Reason: "no legacy files"}
}

func open(t *testing.T, dir string, maxBytes int64) *Log[string] {
	t.Helper()
	l, err := Open[string](dir, maxBytes, 0, textCodec{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func drain(t *testing.T, l *Log[string]) []string {
	t.Helper()
	var got []string
	for _, seq := range l.First(1 << 20) {
		v, _, err := l.View(seq)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	return got
}

// TestLog_ReopenAndRemove: batches appended survive a reopen in order. A
// removed one comes back after a crash while its segment holds others
// (the store must recognize it: a crash between its store and its removal
// looks the same), not after a Close, which compacts the segment; a
// segment whose batches are all removed is deleted.
func TestLog_ReopenAndRemove(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 1<<20)
	for _, v := range []string{"a", "b", "c"} {
		if err := l.Append(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Remove(l.First(1)[0]); err != nil {
		t.Fatal(err)
	}
	// Not closed: as a crash leaves it.
	crashed := t.TempDir()
	for _, name := range segments(t, dir) {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(crashed, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got := drain(t, open(t, crashed, 1<<20)); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("after a crash: %v, want [a b c]", got)
	}
	l.Close()
	re := open(t, dir, 1<<20)
	if got := drain(t, re); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("after a close: %v, want [b c]", got)
	}
	for _, seq := range re.First(10) {
		if err := re.Remove(seq); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := re.Usage(); n != 0 || re.DoneThrough() != re.LastAppended() {
		t.Errorf("drained log: %d batches, done through %d of %d", n, re.DoneThrough(), re.LastAppended())
	}
	re.Close()
	if segs := segments(t, dir); len(segs) != 0 {
		t.Errorf("segments left after every batch was removed: %v", segs)
	}
}

// TestLog_Full: an append past maxBytes is refused with ErrFull and
// leaves nothing behind.
func TestLog_Full(t *testing.T) {
	// Bytes S2 cannot shrink.
	noise := func(seed uint64) string {
		r := rand.New(rand.NewPCG(seed, seed))
		b := make([]byte, 100)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return string(b)
	}
	l := open(t, t.TempDir(), 200)
	if err := l.Append(noise(1)); err != nil {
		t.Fatal(err)
	}
	err := l.Append(noise(2))
	if !errors.Is(err, ErrFull) {
		t.Fatalf("append past the limit: %v, want ErrFull", err)
	}
	if errors.Is(err, ErrTooLarge) {
		t.Errorf("a batch that fits once the spool drains was refused for good: %v", err)
	}
	if n, _ := l.Usage(); n != 1 {
		t.Errorf("%d batches after a refused append, want 1", n)
	}
}

// TestLog_TooLarge: a batch larger than the whole limit never fits,
// however much is drained: ErrTooLarge, not ErrFull, naming the setting
// and both sizes, whether its encoding or its compressed frame passes the
// limit, and in an empty spool.
func TestLog_TooLarge(t *testing.T) {
	noise := func(n int) string {
		r := rand.New(rand.NewPCG(7, 7))
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return string(b)
	}
	l := open(t, t.TempDir(), 200)
	l.LimitKey("serve.sqlite.log_max_bytes")
	f := func(batch, want string) {
		t.Helper()
		err := l.Append(batch)
		if !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrFull) {
			t.Errorf("append of %d bytes to an empty spool of 200: %v, want ErrTooLarge only", len(batch), err)
		} else if err.Error() != want {
			t.Errorf("append of %d bytes: %q, want %q", len(batch), err, want)
		}
	}
	// The encoding alone passes the limit.
	f(noise(300), "cannot spool a batch of 300 bytes encoded: more than the spool's limit of 200: batch too large for the spool (serve.sqlite.log_max_bytes)")
	// The encoding fits, its frame (header, incompressible block) does not.
	f(noise(195), "cannot spool a batch of 214 bytes: more than the spool's limit of 200 (serve.sqlite.log_max_bytes): batch too large for the spool")
	if n, _ := l.Usage(); n != 0 {
		t.Errorf("%d batches after refused appends, want 0", n)
	}
}

// TestLog_DamagedBatch: a frame whose batch does not decode is an error
// matching ErrCorrupt and ErrCodec that names its segment; Reject sets it
// aside and the batches after it still read.
func TestLog_DamagedBatch(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 1<<20)
	for _, v := range []string{"bad one", "good"} {
		if err := l.Append(v); err != nil {
			t.Fatal(err)
		}
	}
	seqs := l.First(2)
	_, _, err := l.View(seqs[0])
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrCodec) || !strings.Contains(err.Error(), SegExt) {
		t.Fatalf("a batch that does not decode: %v", err)
	}
	path, err := l.Reject(seqs[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the rejected frame: %v", err)
	}
	if got := drain(t, l); !slices.Equal(got, []string{"good"}) {
		t.Errorf("after the rejection: %v", got)
	}
}

// segments lists the segment files of dir.
func segments(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), SegExt) {
			names = append(names, e.Name())
		}
	}
	return names
}

// TestLog_LimitLowered: frames appended under a limit are read back whole
// after a restart with a lower one, even larger than it: they were
// acknowledged. Before, recovery took them for a torn tail and cut them
// off (the embedded store lost 9,728 acknowledged calls so).
func TestLog_LimitLowered(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	var want []string
	for range 3 {
		b := make([]byte, 10_000)
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		want = append(want, string(b))
		if err := l.Append(string(b)); err != nil {
			t.Fatal(err)
		}
	}
	// A crash: no Close. Then a restart with a limit below one frame.
	re := open(t, dir, 4096)
	defer re.Close()
	if torn := re.Torn(); len(torn) != 0 {
		t.Errorf("cut %+v off as torn", torn)
	}
	if got := drain(t, re); !slices.Equal(got, want) {
		t.Errorf("read back %d batches, want the 3 appended", len(got))
	}
	// New appends are held to the new limit.
	if err := re.Append(want[0]); !errors.Is(err, ErrTooLarge) {
		t.Errorf("append past the lowered limit: %v, want ErrTooLarge", err)
	}
}

// TestLog_DiskFullSaysItOnce: the error of a write or a sync that the
// disk refuses names the segment once and says what to look at; before,
// a write's read "cannot write spool segment P: write P: no space left on
// device". The write's error is a real one (/dev/full refuses every write
// with ENOSPC); the sync's is injected (fdatasync fails with ENOSPC on a
// full disk with delayed allocation, which a test cannot make on demand).
func TestLog_DiskFullSaysItOnce(t *testing.T) {
	l := open(t, t.TempDir(), 1<<20)
	l.LimitKey("serve.sqlite.log_max_bytes")
	f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("SKIPPING the write: no /dev/full: %v", err)
	}
	_, werr := f.WriteAt([]byte("frame"), 0)
	f.Close()
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("a write to /dev/full: %v, want ENOSPC", werr)
	}
	err = l.ioError("write spool segment", "/dev/full", werr)
	want := "cannot write spool segment /dev/full: no space left on device (the disk is full: free space on it; serve.sqlite.log_max_bytes bounds the log, not the disk)"
	if err.Error() != want || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write error %q, want %q matching ENOSPC", err, want)
	}
	// The file, for the answer to a refused sender: its base name.
	var w interface{ Writing() string }
	if !errors.As(fmt.Errorf("cannot append calls: %w", err), &w) || w.Writing() != "full" {
		t.Errorf("write error %q does not name the file it was writing (full)", err)
	}

	defer func(s func(*os.File) error) { syncSegment = s }(syncSegment)
	syncSegment = func(*os.File) error { return syscall.ENOSPC }
	err = l.Append("batch")
	if err == nil || strings.Count(err.Error(), "no space left on device") != 1 ||
		!strings.Contains(err.Error(), "cannot sync spool segment "+l.dir) || !strings.Contains(err.Error(), "serve.sqlite.log_max_bytes") {
		t.Errorf("sync error %q: want the segment and the cause once, and the setting", err)
	}
}
