package clickhouse

import (
	"bytes"
	"errors"
	"fmt"
	spoollog "github.com/mcpaudit/mcpaudit/internal/spool"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// spoolFiles returns the names in dir with ext.
// mustOpenSpool opens the spool in dir as the tests use it: 1 MiB at most,
// no batch kept in memory.
func mustOpenSpool(t *testing.T, dir string) *spool {
	t.Helper()
	sp, err := openSpool(dir, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// appendBatches appends a batch of one call for each id, each acknowledged
// (synced) before the next.
func appendBatches(t *testing.T, sp *spool, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := sp.append(testBatch(id)); err != nil {
			t.Fatal(err)
		}
	}
}

func spoolFiles(t *testing.T, dir, ext string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ext) {
			names = append(names, e.Name())
		}
	}
	return names
}

// callIDs returns the ids of the calls of the spool's batches, oldest
// first, read as the drain reads them.
func callIDs(t *testing.T, sp *spool) []string {
	t.Helper()
	var ids []string
	for _, seq := range sp.first(1 << 20) {
		b, err := sp.read(seq)
		if err != nil {
			t.Fatalf("read batch %d: %v", seq, err)
		}
		for _, c := range b.Calls {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// copyDir copies the files of dir, as they are now, to a new directory: what
// a kill -9 at this moment would leave on disk (the page cache outlives the
// process).
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// hookSync replaces the segments' sync for the test.
func hookSync(t *testing.T, f func(*os.File) error) {
	t.Helper()
	t.Cleanup(spoollog.SetSync(f))
}

// TestSpool_OneSyncPerAppend: an append is one frame at the end of the
// active segment and one sync of it; the segment is created (and its
// directory synced) ahead, not per append.
func TestSpool_OneSyncPerAppend(t *testing.T) {
	var syncs atomic.Int64
	hookSync(t, func(f *os.File) error { syncs.Add(1); return fdatasync(f) })
	dir := t.TempDir()
	sp := mustOpenSpool(t, dir)
	for i := range 5 {
		if err := sp.append(testBatch(fmt.Sprint("c_", i))); err != nil {
			t.Fatal(err)
		}
		if got := syncs.Load(); got != int64(i+1) {
			t.Fatalf("after %d appends, %d syncs of a segment; want one each", i+1, got)
		}
	}
	if segs := spoolFiles(t, dir, spoolSegExt); len(segs) != 1 || len(spoolFiles(t, dir, spoolExt)) != 0 {
		t.Fatalf("spool directory holds segments %v (and %d files of a batch each); want one segment", segs, len(spoolFiles(t, dir, spoolExt)))
	}
	for i, seq := range sp.first(64) {
		_, off, _ := frameAt(t, sp, seq)
		if i == 0 && off != 0 {
			t.Errorf("the first frame is at byte %d", off)
		}
	}
}

// TestSpool_GroupCommit: appends that arrive while a sync is in flight
// share the next sync, and none returns before a sync that started after
// its frame was written.
func TestSpool_GroupCommit(t *testing.T) {
	type syncCall struct{ covered int64 }
	var mu sync.Mutex
	var calls []syncCall
	release := make(chan struct{})
	first := make(chan struct{}, 1)
	hookSync(t, func(f *os.File) error {
		info, err := f.Stat()
		if err != nil {
			return err
		}
		mu.Lock()
		calls = append(calls, syncCall{covered: info.Size()})
		n := len(calls)
		mu.Unlock()
		if n == 1 {
			first <- struct{}{}
			<-release // hold the first sync while the others write
		}
		return fdatasync(f)
	})
	sp, err := openSpool(t.TempDir(), 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	type result struct {
		id  string
		err error
		at  int // how many syncs had started when the append returned
	}
	results := make(chan result, n)
	appendOne := func(id string) {
		err := sp.append(testBatch(id))
		mu.Lock()
		at := len(calls)
		mu.Unlock()
		results <- result{id, err, at}
	}
	go appendOne("c_0")
	<-first
	for i := 1; i < n; i++ {
		go appendOne(fmt.Sprint("c_", i))
	}
	// The others have written their frames and wait for the sync in
	// flight; none is acknowledged by it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		written := sp.State().Entries
		if written == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d frames written", written, n)
		}
		time.Sleep(time.Millisecond)
	}
	if got := sp.first(64); len(got) != 0 {
		t.Fatalf("the drain sees batches %v before their sync", got)
	}
	select {
	case r := <-results:
		t.Fatalf("append of %s returned (%v) before any sync finished", r.id, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	for range n {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 {
		t.Errorf("%d appends took %d syncs; want 2 (the first, then one for the seven that came during it)", n, len(calls))
	}
	// Every frame is covered by a sync that finished before its append
	// returned: the last sync covered the whole file.
	size := sp.State().ActiveSize
	if last := calls[len(calls)-1].covered; last != size {
		t.Errorf("the last sync covered %d bytes of %d", last, size)
	}
	if got := len(sp.first(64)); got != n {
		t.Errorf("the drain sees %d batches after the syncs, want %d", got, n)
	}
}

// TestSpool_CrashBeforeSync: a kill -9 between a frame's write and its sync
// leaves the acknowledged batches whole. The unacknowledged frame is found
// again if it reached the file whole (drained, as a batch its sender was
// told nothing about and sends again), and cut off as a torn tail if not.
func TestSpool_CrashBeforeSync(t *testing.T) {
	dir := t.TempDir()
	sp := mustOpenSpool(t, dir)
	appendBatches(t, sp, "c_1", "c_2")
	blocked, release := make(chan struct{}), make(chan struct{})
	hookSync(t, func(f *os.File) error {
		close(blocked)
		<-release
		return fdatasync(f)
	})
	done := make(chan error, 1)
	go func() { done <- sp.append(testBatch("c_3")) }()
	<-blocked
	crashed := copyDir(t, dir)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	spoollog.SetSync(fdatasync)
	seg := spoolFiles(t, crashed, spoolSegExt)[0]
	info, err := os.Stat(filepath.Join(crashed, seg))
	if err != nil {
		t.Fatal(err)
	}
	_, off3, size3 := frameAt(t, sp, 3)
	if info.Size() != off3+size3 {
		t.Fatalf("the crashed segment has %d bytes, want the third frame written (%d)", info.Size(), off3+size3)
	}
	t.Run("whole", func(t *testing.T) {
		dir := copyDir(t, crashed)
		re := mustOpenSpool(t, dir)
		if got := callIDs(t, re); !slices.Equal(got, []string{"c_1", "c_2", "c_3"}) {
			t.Errorf("recovered calls %v", got)
		}
	})
	for _, cut := range []int64{1, int64(frameHeaderLen), size3 / 2, size3 - 1} {
		t.Run(fmt.Sprint("torn_after_", cut), func(t *testing.T) {
			dir := copyDir(t, crashed)
			path := filepath.Join(dir, seg)
			if err := os.Truncate(path, off3+cut); err != nil {
				t.Fatal(err)
			}
			re := mustOpenSpool(t, dir)
			if got := callIDs(t, re); !slices.Equal(got, []string{"c_1", "c_2"}) {
				t.Errorf("recovered calls %v, want the two acknowledged", got)
			}
			if len(re.Torn()) != 1 || re.Torn()[0].At != off3 || re.Torn()[0].Bytes != cut {
				t.Errorf("torn tails %+v, want %d bytes at %d", re.Torn(), cut, off3)
			}
			if info, err := os.Stat(path); err != nil || info.Size() != off3 {
				t.Errorf("the segment was not cut back to %d bytes: %v, %v", off3, info.Size(), err)
			}
			// New appends go to a new segment, after the recovered one.
			if err := re.append(testBatch("c_4")); err != nil {
				t.Fatal(err)
			}
			re.close()
			again := mustOpenSpool(t, dir)
			if got := callIDs(t, again); !slices.Equal(got, []string{"c_1", "c_2", "c_4"}) {
				t.Errorf("calls after a second restart %v", got)
			}
			if len(again.Torn()) != 0 {
				t.Errorf("the second restart found torn tails %+v", again.Torn())
			}
			// The kept tail is still set aside, for a person to move out.
			if rejected, torn, err := again.setAside(); err != nil || rejected != 0 || torn != 1 {
				t.Errorf("files set aside after the second restart: %d rejected, %d torn, %v; want 0, 1", rejected, torn, err)
			}
		})
	}
}

// TestSpool_TornTail: what a crash can leave after the last frame whose
// sync returned (a partial header, a header with part of its block, a whole
// length with bytes that do not match their checksum, zeros) is cut off;
// the acknowledged frames before it all drain.
func TestSpool_TornTail(t *testing.T) {
	next := encodeFrameCopy(t, testBatch("c_x"))
	garbled := slices.Clone(next)
	for i := frameHeaderLen; i < len(garbled); i++ {
		garbled[i] = 0
	}
	for _, tc := range []struct {
		name string
		tail []byte
	}{
		{"header_part", next[:5]},
		{"header", next[:frameHeaderLen]},
		{"block_part", next[:len(next)-3]},
		{"block_zeros", garbled},
		{"zeros", make([]byte, 4096)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sp := mustOpenSpool(t, dir)
			appendBatches(t, sp, "c_1", "c_2", "c_3")
			path, off, size := frameAt(t, sp, 3)
			sp.close()
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write(tc.tail)
			f.Close()
			re := mustOpenSpool(t, dir)
			if got := callIDs(t, re); !slices.Equal(got, []string{"c_1", "c_2", "c_3"}) {
				t.Errorf("recovered calls %v", got)
			}
			if len(re.Torn()) != 1 || re.Torn()[0].At != off+size || re.Torn()[0].Bytes != int64(len(tc.tail)) {
				t.Errorf("torn tails %+v, want %d bytes at %d", re.Torn(), len(tc.tail), off+size)
			}
			checkKeptTail(t, dir, tc.tail)
		})
	}
	// The last acknowledged frame damaged, with nothing after it, is
	// indistinguishable from a torn write: it is cut off too, and said
	// so (docs/clickhouse.md).
	t.Run("last_frame_damaged", func(t *testing.T) {
		dir := t.TempDir()
		sp := mustOpenSpool(t, dir)
		appendBatches(t, sp, "c_1", "c_2")
		path, off, size := frameAt(t, sp, 2)
		sp.close()
		flip(t, path, off+size-2, 1)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		re := mustOpenSpool(t, dir)
		if got := callIDs(t, re); !slices.Equal(got, []string{"c_1"}) || len(re.Torn()) != 1 || re.Torn()[0].At != off {
			t.Errorf("recovered calls %v, torn %+v", got, re.Torn())
		}
		// Acknowledged, then damaged: its bytes are kept, not destroyed.
		checkKeptTail(t, dir, data[off:off+size])
		// The kept file is not read as part of the spool at the next start.
		again := mustOpenSpool(t, dir)
		if got := callIDs(t, again); !slices.Equal(got, []string{"c_1"}) || len(again.Torn()) != 0 {
			t.Errorf("second restart: calls %v, torn %+v", got, again.Torn())
		}
		checkKeptTail(t, dir, data[off:off+size])
	})
	// A file of someone else's under a segment's name has no whole frame:
	// it is cut off whole, and kept.
	t.Run("stray_file", func(t *testing.T) {
		dir := t.TempDir()
		junk := bytes.Repeat([]byte("not a frame "), 250)
		if err := os.WriteFile(filepath.Join(dir, "00000000000000000009.log"), junk, 0o600); err != nil {
			t.Fatal(err)
		}
		re := mustOpenSpool(t, dir)
		if n, _ := re.usage(); n != 0 || len(re.Torn()) != 1 {
			t.Errorf("%d batches, torn %+v", n, re.Torn())
		}
		checkKeptTail(t, dir, junk)
	})
}

// TestSpool_TornTailNotKept: when the torn tail cannot be copied out (a
// full disk), the spool still opens, with the frames before it, and the
// tail stays in the segment rather than being destroyed.
func TestSpool_TornTailNotKept(t *testing.T) {
	dir := t.TempDir()
	sp := mustOpenSpool(t, dir)
	appendBatches(t, sp, "c_1", "c_2")
	path, off, size := frameAt(t, sp, 2)
	sp.close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 100))
	f.Close()
	hookKeepTorn(t, func(string, string, *os.File, int64, int64) (string, error) {
		return "", errors.New("no space left on device")
	})
	re, err := openSpool(dir, 1<<20, 0)
	if err != nil {
		t.Fatalf("the spool did not open: %v", err)
	}
	if got := callIDs(t, re); !slices.Equal(got, []string{"c_1", "c_2"}) || len(re.Torn()) != 1 || re.Torn()[0].KeepErr == nil || re.Torn()[0].At != off+size {
		t.Errorf("recovered calls %v, torn %+v", got, re.Torn())
	}
	if info, err := os.Stat(path); err != nil || info.Size() != off+size+100 {
		t.Errorf("the segment was cut although its tail was not kept: %v %v", info.Size(), err)
	}
}

// checkKeptTail checks that dir holds one .torn file, with the bytes want.
func checkKeptTail(t *testing.T, dir string, want []byte) {
	t.Helper()
	kept, err := filepath.Glob(filepath.Join(dir, "*.torn"))
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 1 {
		t.Fatalf("files keeping a torn tail: %v, want one", kept)
	}
	got, err := os.ReadFile(kept[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s holds %d bytes, want the %d cut off", kept[0], len(got), len(want))
	}
}

// TestSpool_SyncFails: an append whose sync fails is not acknowledged and
// not drained; nothing more goes into that segment (after a failed sync
// its pages cannot be trusted), and the next append starts a new one.
func TestSpool_SyncFails(t *testing.T) {
	dir := t.TempDir()
	sp := mustOpenSpool(t, dir)
	if err := sp.append(testBatch("c_1")); err != nil {
		t.Fatal(err)
	}
	eio := errors.New("input/output error")
	var fail atomic.Bool
	fail.Store(true)
	hookSync(t, func(f *os.File) error {
		if fail.Load() {
			return eio
		}
		return fdatasync(f)
	})
	if err := sp.append(testBatch("c_2")); !errors.Is(err, eio) {
		t.Fatalf("append with a failing sync = %v", err)
	}
	fail.Store(false)
	if err := sp.append(testBatch("c_3")); err != nil {
		t.Fatal(err)
	}
	if got := callIDs(t, sp); !slices.Equal(got, []string{"c_1", "c_3"}) {
		t.Errorf("the drain sees calls %v, want the acknowledged ones", got)
	}
	if n, _ := sp.usage(); n != 2 {
		t.Errorf("usage counts %d batches, want 2", n)
	}
	if segs := spoolFiles(t, dir, spoolSegExt); len(segs) != 2 {
		t.Errorf("segments %v, want the failed one and a new one", segs)
	}
}

// TestSpool_Segments: segments rotate by size; each is removed once the
// drain has every batch in it, the active one too, so an idle spool holds
// no batch on disk; a spare is ready for the next append; Close leaves no
// segment when everything drained.
func TestSpool_Segments(t *testing.T) {
	var syncs atomic.Int64
	hookSync(t, func(f *os.File) error { syncs.Add(1); return fdatasync(f) })
	dir := t.TempDir()
	sp := mustOpenSpool(t, dir)
	// A batch's version is the clock's, so its frame's size may differ by
	// a byte from another's: the segments hold three of the largest.
	var ids []string
	var batches []*batch
	var frame int64
	for i := range 7 {
		id := fmt.Sprintf("c_%02d", i)
		ids = append(ids, id)
		batches = append(batches, testBatch(id))
		frame = max(frame, int64(len(encodeFrameCopy(t, batches[i]))))
	}
	sp.SetSegmentBytes(3 * frame)
	for _, b := range batches {
		if err := sp.append(b); err != nil {
			t.Fatal(err)
		}
	}
	if segs := spoolFiles(t, dir, spoolSegExt); len(segs) != 3 {
		t.Fatalf("7 frames of %d bytes in segments of %d: %v, want 3", frame, 3*frame, segs)
	}
	re := mustOpenSpool(t, dir)
	if got := callIDs(t, re); !slices.Equal(got, ids) {
		t.Fatalf("recovered calls %v, want %v in order", got, ids)
	}
	for i, seq := range sp.first(64) {
		if err := sp.remove(seq); err != nil {
			t.Fatal(err)
		}
		if segs := spoolFiles(t, dir, spoolSegExt); i == 2 && len(segs) != 3 {
			// The first segment went; a spare was made for the next
			// rotation.
			t.Errorf("after draining the first segment: %v", segs)
		}
	}
	st := sp.State()
	if st.Active || !st.Spare {
		t.Fatalf("drained spool: %+v; want no active segment and a spare", st)
	}
	sparePath := spoollog.SegmentPath(dir, st.SpareID)
	if segs := spoolFiles(t, dir, spoolSegExt); !slices.Equal(segs, []string{filepath.Base(sparePath)}) {
		t.Errorf("segments of a drained spool %v, want the empty spare alone", segs)
	}
	// The next append takes the spare: no segment created on its way.
	if err := sp.append(testBatch("c_10")); err != nil {
		t.Fatal(err)
	}
	if path, _, _ := frameAt(t, sp, sp.first(1)[0]); path != sparePath {
		t.Errorf("the append after the drain went to %s, want the spare %s", path, sparePath)
	}
	if err := sp.remove(sp.first(1)[0]); err != nil {
		t.Fatal(err)
	}
	sp.close()
	if segs := spoolFiles(t, dir, spoolSegExt); len(segs) != 0 {
		t.Errorf("a drained spool left segments %v at close", segs)
	}
}

// TestSpool_OldReleases: a spool left by earlier releases, one batch per
// file (frame version 2, version 1 and gob), drains first, then the
// segments written after the upgrade, in order; each file is removed as
// its batch drains.
func TestSpool_OldReleases(t *testing.T) {
	dir := t.TempDir()
	var old [][]byte
	for _, name := range []string{"v0-call.gob", "v1-call.batch", "v2-call.batch"} {
		data, err := os.ReadFile(filepath.Join("testdata", "spool", name))
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, data)
	}
	writeOldSpool(t, dir, old...)
	sp := mustOpenSpool(t, dir)
	appendBatches(t, sp, "c_new_1", "c_new_2")
	sp.close()
	re := mustOpenSpool(t, dir)
	want := []string{"c_old_gob", "c_old_v1", "c_old_v2", "c_new_1", "c_new_2"}
	if got := callIDs(t, re); !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	for _, seq := range re.first(64) {
		if err := re.remove(seq); err != nil {
			t.Fatal(err)
		}
	}
	re.close()
	if left := append(spoolFiles(t, dir, spoolExt), spoolFiles(t, dir, spoolSegExt)...); len(left) != 0 {
		t.Errorf("files left after the drain: %v", left)
	}
}

// FuzzScanSegment feeds recovery's walk through a segment arbitrary bytes:
// it never panics, and what it returns covers the file from its start to
// end without a gap or an overlap, each frame it calls whole decoding or
// failing as corrupt, never anything else.
func FuzzScanSegment(f *testing.F) {
	var seg []byte
	for _, id := range []string{"c_1", "c_2", "c_3"} {
		seg = append(seg, encodeFrameCopy(f, testBatch(id))...)
	}
	f.Add(seg)
	f.Add(seg[:len(seg)-7])
	mid := slices.Clone(seg)
	mid[len(seg)/2] ^= 1
	f.Add(mid)
	f.Add(append(slices.Clone(seg), make([]byte, 64)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		refs, end, err := spoollog.ScanSegment(bytes.NewReader(data), int64(len(data)), 1<<20)
		if err != nil {
			t.Fatalf("spoollog.ScanSegment of bytes in memory: %v", err)
		}
		at := int64(0)
		for _, r := range refs {
			if r.Off != at || r.Size <= 0 {
				t.Fatalf("refs %+v: a gap or an overlap at byte %d", refs, at)
			}
			at += r.Size
			if r.Damage != nil {
				continue
			}
			if _, err := decodeFrame(data[r.Off:r.Off+r.Size], 1<<20); err != nil && !errors.Is(err, errSpoolCorrupt) {
				t.Fatalf("frame at %d: %v", r.Off, err)
			}
		}
		if at != end || end > int64(len(data)) {
			t.Fatalf("refs end at %d, scan says %d, file has %d", at, end, len(data))
		}
	})
}

// TestSpool_CloseCompacts: at Close, a segment some of whose batches the
// drain already has is copied without them, so that the next start sends
// only what is left; one with a damaged region stays as it is.
func TestSpool_CloseCompacts(t *testing.T) {
	dir := t.TempDir()
	sp := mustOpenSpool(t, dir)
	appendBatches(t, sp, "c_1", "c_2", "c_3")
	if err := sp.remove(sp.first(1)[0]); err != nil {
		t.Fatal(err)
	}
	sp.close()
	re := mustOpenSpool(t, dir)
	if got := callIDs(t, re); !slices.Equal(got, []string{"c_2", "c_3"}) {
		t.Errorf("calls after a restart %v, want the two not drained", got)
	}
	if segs := spoolFiles(t, dir, spoolSegExt); len(segs) != 1 {
		t.Errorf("segments %v, want the copy alone", segs)
	}
	// A recovered segment with a damaged region in it is left whole.
	path, off, _ := frameAt(t, re, re.first(1)[0])
	re.close()
	flip(t, path, off+3, 1) // the magic of c_2's frame
	re = mustOpenSpool(t, dir)
	if err := re.remove(re.Seqs()[1]); err != nil { // c_3
		t.Fatal(err)
	}
	re.close()
	again := mustOpenSpool(t, dir)
	if n, _ := again.usage(); n != 2 || !again.Damaged(again.Seqs()[0]) {
		t.Errorf("after a restart: %d entries (first damaged: %v), want the damaged region and c_3 again", n, again.Damaged(again.Seqs()[0]))
	}
}
