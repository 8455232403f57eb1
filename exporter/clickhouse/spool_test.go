package clickhouse

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/mcpaudit/mcpaudit/audit"
)

func testBatch(ids ...string) *batch {
	b := new(batch)
	var rows []callRow
	for i, id := range ids {
		// Strings are kept byte for byte, invalid UTF-8 included.
		rows = append(rows, callRow{ID: id, Tenant: "acme", Time: int64(1000 + i), Document: "a", Arguments: `{"x":1}`, Fingerprint: "\x00\xffraw", Flags: flagArguments})
	}
	b.addCalls(rows)
	b.addResults([]writeRow{{CallID: ids[0], State: "durable", Version: 7}}, nil, &watermarkRow{Replica: "r", Time: 5, Version: 8})
	b.seal()
	return b
}

func TestSpool(t *testing.T) {
	dir := t.TempDir()
	sp := mustOpenSpool(t, dir)
	a, b := testBatch("c_1", "c_2"), testBatch("c_3")
	a.Done[tCalls] = true
	for _, x := range []*batch{a, b} {
		if err := sp.append(x); err != nil {
			t.Fatal(err)
		}
	}
	// A batch whose write was cut short never became visible; a reopen
	// removes it and finds the two others in order.
	if err := os.WriteFile(filepath.Join(dir, "00000000000000000009.tmp"), []byte(`{"calls":[`), 0o640); err != nil {
		t.Fatal(err)
	}
	sp = mustOpenSpool(t, dir)
	if n, _ := sp.usage(); n != 2 {
		t.Fatalf("reopened spool holds %d batches, want 2", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "00000000000000000009.tmp")); !os.IsNotExist(err) {
		t.Errorf("the unfinished file is still there: %v", err)
	}
	seq := sp.first(1)[0]
	got, err := sp.read(seq)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Calls, a.Calls) || got.Token != a.Token || got.Done != a.Done || !reflect.DeepEqual(got.Watermarks, a.Watermarks) {
		t.Errorf("read back %+v, want %+v", got, a)
	}
	if err := sp.remove(seq); err != nil {
		t.Fatal(err)
	}
	seq = sp.first(1)[0]
	bad, err := sp.reject(seq)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(bad, spoolBadExt) {
		t.Errorf("rejected batch moved to %s", bad)
	}
	if rejected, torn, err := sp.setAside(); err != nil || rejected != 1 || torn != 0 {
		t.Errorf("files set aside: %d rejected, %d torn, %v; want 1, 0", rejected, torn, err)
	}
	if n, bytes := sp.usage(); n != 0 || bytes != 0 {
		t.Errorf("spool holds %d batches, %d bytes after draining, want none", n, bytes)
	}
	// A new batch does not reuse the number of the rejected one.
	if err := sp.append(testBatch("c_4")); err != nil {
		t.Fatal(err)
	}
	if next := sp.first(1)[0]; next <= seq {
		t.Errorf("new batch numbered %d after rejected %d", next, seq)
	}
}

// TestSpool_Kept checks that a batch kept in memory reads back as its file
// does, that an insert changing what it read leaves the kept batch as
// spooled, and that only a run of batches from the oldest is kept.
func TestSpool_Kept(t *testing.T) {
	dir := t.TempDir()
	sp, err := openSpool(dir, 1<<20, 3)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := testBatch("c_1", "c_2"), testBatch("c_3"), testBatch("c_4")
	a.Done[tCalls] = true
	a.chain = &batchChain{done: true}
	for _, x := range []*batch{a, b, c} {
		if err := sp.append(x); err != nil {
			t.Fatal(err)
		}
	}
	// a (2 rows of calls, 1 write, 1 watermark) passes the limit of 3
	// rows alone: nothing is kept, since a batch kept behind one that is
	// not would wait in memory for the whole backlog.
	if n := sp.State().Kept; n != 0 {
		t.Fatalf("kept %d batches, want 0", n)
	}
	sp, err = openSpool(t.TempDir(), 1<<20, 6)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []*batch{a, b, c} {
		if err := sp.append(x); err != nil {
			t.Fatal(err)
		}
	}
	if kb, ok := sp.IsKept(sp.first(1)[0]); sp.State().Kept != 1 || !ok || kb != a {
		t.Fatalf("kept %+v, want the first batch only (4 rows, then 3 more pass 6)", sp.State())
	}
	disk, err := openSpool(sp.Dir(), 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	seq := sp.first(1)[0]
	mem, err := sp.read(seq)
	if err != nil {
		t.Fatal(err)
	}
	file, err := disk.read(seq)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(mem.Calls, file.Calls) || !reflect.DeepEqual(mem.Writes, file.Writes) || !reflect.DeepEqual(mem.Watermarks, file.Watermarks) ||
		mem.Token != file.Token || mem.Done != file.Done || !mem.spooled || mem.chain != nil {
		t.Errorf("kept batch read back as %+v, its file as %+v", mem, file)
	}
	mem.Calls[0].Chain = 99
	mem.merge(b)
	again, err := sp.read(seq)
	if err != nil {
		t.Fatal(err)
	}
	if again.Calls[0].Chain != 0 || len(again.Calls) != 2 {
		t.Errorf("an insert's changes reached the kept batch: %+v", again.Calls)
	}
	if err := sp.remove(seq); err != nil {
		t.Fatal(err)
	}
	if st := sp.State(); st.Kept != 0 || st.KeptRows != 0 {
		t.Errorf("a removed batch is still kept: %d batches, %d rows", st.Kept, st.KeptRows)
	}
}

// TestSpool_GobFile checks that a spool file of an earlier release, the bare
// gob of its batch, is still read, and that new files are compressed.
func TestSpool_GobFile(t *testing.T) {
	dir := t.TempDir()
	a := testBatch("c_1", "c_2")
	var buf bytes.Buffer
	// As an earlier release wrote it: four tables (gobBatch).
	old := gobBatch{Calls: a.Calls, Writes: a.Writes, Findings: a.Findings, Watermarks: a.Watermarks, Token: a.Token}
	if err := gob.NewEncoder(&buf).Encode(old); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "00000000000000000003.batch"), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	sp := mustOpenSpool(t, dir)
	got, err := sp.read(3)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Calls, a.Calls) || got.Token != a.Token {
		t.Errorf("read back %+v, want %+v", got, a)
	}
	if err := sp.append(a); err != nil {
		t.Fatal(err)
	}
	path, off, _ := frameAt(t, sp, 4)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if off != 0 || !bytes.HasPrefix(data, []byte(spoolMagic)) {
		t.Errorf("new segment starts %q (the frame at %d), want the S2 header", data[:min(len(data), 16)], off)
	}
	if got, err = sp.read(4); err != nil || !reflect.DeepEqual(got.Calls, a.Calls) {
		t.Errorf("compressed file read back %+v, %v", got, err)
	}
}

func TestSpool_Full(t *testing.T) {
	sp, err := openSpool(t.TempDir(), 600, 0)
	if err != nil {
		t.Fatal(err)
	}
	var full error
	for i := range 10 {
		if err := sp.append(testBatch("c_" + string(rune('a'+i)))); err != nil {
			full = err
			break
		}
	}
	if !errors.Is(full, errSpoolFull) {
		t.Fatalf("append past max bytes = %v, want errSpoolFull", full)
	}
}

// TestStore_Unreachable opens a store on a port where nothing listens: Open
// succeeds, writes are acknowledged from the spool, Ready and the reads say
// ErrUnavailable, and a full spool makes AppendCalls fail with it.
func TestStore_Unreachable(t *testing.T) {
	o := NewDefaultOptions()
	o.DSN = "clickhouse://127.0.0.1:1/default?dial_timeout=200ms"
	o.Spool.Dir = t.TempDir()
	o.Spool.MaxBytes = 64 << 10
	o.BatchAge = 5 * time.Millisecond
	o.Logger = testLogger(t)
	ctx := context.Background()
	s, err := Open(ctx, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if err := s.Ready(); !errors.Is(err, audit.ErrUnavailable) {
		t.Errorf("Ready = %v, want ErrUnavailable", err)
	}
	rec := func(id string) audit.Record {
		// About 4 KB that the spool's compression cannot shrink.
		var args []byte
		for i := uint64(0); len(args) < 4000; i++ {
			args = fmt.Appendf(args, "%016x", splitmix(i^uint64(len(id))<<32))
		}
		return audit.Record{Call: &audit.Call{ID: id, Time: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC), Server: "thegram", Arguments: args}}
	}
	if _, err := s.AppendCalls(ctx, []audit.Record{rec("c_1")}); err != nil {
		t.Fatalf("AppendCalls while unreachable = %v, want it spooled", err)
	}
	if n, _ := s.spool.usage(); n != 1 {
		t.Errorf("spool holds %d batches, want 1", n)
	}
	if err := s.Commit(ctx, audit.Results{Watermark: time.Date(2026, 11, 2, 9, 0, 1, 0, time.UTC)}); err != nil {
		t.Fatalf("Commit while unreachable = %v, want it spooled", err)
	}
	if wm, err := s.Watermark(ctx); err != nil || wm.IsZero() {
		t.Errorf("Watermark = %v, %v; want the spooled one", wm, err)
	}
	if _, err := s.Findings(ctx, audit.FindingQuery{}); !errors.Is(err, audit.ErrUnavailable) {
		t.Errorf("Findings = %v, want ErrUnavailable", err)
	}
	var full error
	for i := range 100 {
		if _, full = s.AppendCalls(ctx, []audit.Record{rec("c_more_" + string(rune('a'+i)))}); full != nil {
			break
		}
	}
	if !errors.Is(full, audit.ErrUnavailable) || !strings.Contains(full.Error(), "spool full") {
		t.Errorf("AppendCalls with a full spool = %v, want ErrUnavailable (spool full)", full)
	}
	// A store opened on the same spool knows the spooled watermark.
	s.Close()
	s2, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if wm, err := s2.Watermark(ctx); err != nil || !wm.Equal(time.Date(2026, 11, 2, 9, 0, 1, 0, time.UTC)) {
		t.Errorf("Watermark after reopen = %v, %v; want the spooled one", wm, err)
	}
}

func TestBatchMerge(t *testing.T) {
	a := testBatch("c_1", "c_2")
	b := testBatch("c_2", "c_3")
	b.Writes[0].Version = 9 // a later state of the write of c_1
	b.Writes[0].CallID = "c_1"
	b.Writes[0].State = "resolved"
	b.Watermarks[0].Version = 10
	b.Watermarks[0].Time = 6
	tokenA := a.Token
	a.merge(b)
	a.finish()
	var ids []string
	for _, c := range a.Calls {
		ids = append(ids, c.ID)
	}
	if !reflect.DeepEqual(ids, []string{"c_1", "c_2", "c_3"}) {
		t.Errorf("merged calls %v, want each id once, in order", ids)
	}
	if len(a.Writes) != 1 || a.Writes[0].State != "resolved" {
		t.Errorf("merged writes %+v, want the later state of c_1 only", a.Writes)
	}
	if len(a.Watermarks) != 1 || a.Watermarks[0].Time != 6 {
		t.Errorf("merged watermarks %+v, want the later one", a.Watermarks)
	}
	if a.Token == tokenA || a.Token == "" {
		t.Error("the merged batch kept the token of its first part")
	}
}

// TestGather_Kept checks that the drain merges batches kept in memory as it
// merges their files, and leaves the kept batches as spooled.
func TestGather_Kept(t *testing.T) {
	dir := t.TempDir()
	mem, err := openSpool(dir, 1<<20, 1000)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := testBatch("c_1", "c_2"), testBatch("c_2", "c_3"), testBatch("c_4")
	b.Writes[0].Version, b.Writes[0].State = 9, "resolved" // a later state of the write of c_2
	for _, x := range []*batch{a, b, c} {
		if err := mem.append(x); err != nil {
			t.Fatal(err)
		}
	}
	disk := mustOpenSpool(t, dir)
	fromMem, used, err := (&Store{spool: mem, opts: Options{BatchSize: 100}}).gather(mem.first(64), false)
	if err != nil || len(used) != 3 {
		t.Fatalf("gather = %v, %v; want the three batches", used, err)
	}
	fromDisk, _, err := (&Store{spool: disk, opts: Options{BatchSize: 100}}).gather(disk.first(64), false)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range fromMem.Calls {
		ids = append(ids, r.ID)
	}
	if !reflect.DeepEqual(ids, []string{"c_1", "c_2", "c_3", "c_4"}) || !fromMem.spooled {
		t.Errorf("merged calls %v (spooled %v), want each id once, in order, spooled", ids, fromMem.spooled)
	}
	if !reflect.DeepEqual(fromMem.Calls, fromDisk.Calls) || !reflect.DeepEqual(fromMem.Writes, fromDisk.Writes) ||
		!reflect.DeepEqual(fromMem.Watermarks, fromDisk.Watermarks) || fromMem.Token != fromDisk.Token {
		t.Errorf("merged from memory %+v, from the files %+v", fromMem, fromDisk)
	}
	fromMem.Calls[0].Chain = 7
	fromMem.Writes[0].State = "changed"
	if a2, _ := mem.read(used[0]); a2.Calls[0].Chain != 0 || a.Writes[0].State != "durable" {
		t.Errorf("the insert's changes reached the kept batch: %+v", a2)
	}
}

// filled returns a T whose every field holds a value of its own (strings
// with invalid UTF-8, negative and large integers), so that a field the
// spool codec forgets, or reads into another, shows in a round trip.
func filled[T any](seed int) T {
	var v T
	rv := reflect.ValueOf(&v).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		n := seed*100 + i + 1
		switch f.Kind() {
		case reflect.String:
			f.SetString(fmt.Sprintf("\xff%d-%s", n, strings.Repeat("x", n%7)))
		case reflect.Int64, reflect.Int32:
			f.SetInt(-int64(n) << (f.Type().Bits() - 12))
		case reflect.Uint64, reflect.Uint32, reflect.Uint8:
			f.SetUint(uint64(n)<<(f.Type().Bits()-8) | 1)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{fmt.Sprint(n), "", "\x00"}))
		default:
			panic(fmt.Sprintf("filled: field %s of kind %s: teach the spool codec and this test", rv.Type().Field(i).Name, f.Kind()))
		}
	}
	return v
}

func TestSpoolCodec_EveryField(t *testing.T) {
	b := &batch{
		Calls:      []callRow{filled[callRow](1), filled[callRow](2), {ID: "c_empty"}},
		Writes:     []writeRow{filled[writeRow](3), {CallID: "c_empty", StateDelay: noStateTime}},
		Findings:   []findingRow{filled[findingRow](4)},
		Watermarks: []watermarkRow{filled[watermarkRow](5)},
		TooLate:    []tooLateRow{filled[tooLateRow](6)},
		Token:      "tok",
	}
	b.Done[tWrites], b.Done[tWatermarks], b.Done[tTooLate] = true, true, true
	// Empty lists come back as nil, as they did from gob; the columns
	// insert both as empty arrays.
	want := *b
	data := appendBatch(nil, b)
	got, err := decodeBatch(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", *got, want)
	}
	// A batch cut anywhere, or with bytes after it, is refused, not
	// half read.
	for _, n := range []int{0, 1, len(data) / 3, len(data) - 1} {
		if _, err := decodeBatch(data[:n]); !errors.Is(err, errSpoolCodec) {
			t.Errorf("batch cut at %d of %d bytes: err = %v, want errSpoolCodec", n, len(data), err)
		}
	}
	if _, err := decodeBatch(append(data, 0)); !errors.Is(err, errSpoolCodec) {
		t.Errorf("batch with a byte after it: err = %v, want errSpoolCodec", err)
	}
	// A batch without calls too late is encoded as before they came (no
	// list at the end), so that one spooled by an earlier release reads
	// back, and a byte after it is still refused.
	old := want
	old.TooLate, old.Done[tTooLate] = nil, false
	data = appendBatch(nil, &old)
	if got, err := decodeBatch(data); err != nil || !reflect.DeepEqual(*got, old) {
		t.Errorf("round trip without calls too late: %+v, %v", got, err)
	}
	if _, err := decodeBatch(append(data, 0)); !errors.Is(err, errSpoolCodec) {
		t.Errorf("batch without calls too late, with a zero byte after it: err = %v, want errSpoolCodec", err)
	}
}

// BenchmarkSpoolEncode measures what an acknowledgement with Ack "log"
// spends making a 512-call batch into a spool file's bytes, before the
// write and sync: the spool's codec, S2 and the frame's checksum
// (encodeFrame, as spool.append), against the gob that earlier releases
// wrote.
func BenchmarkSpoolEncode(b *testing.B) {
	const calls = 512
	bt := benchBatch(b, calls)
	b.Run("codec+s2", func(b *testing.B) {
		b.ReportAllocs()
		var n int
		for b.Loop() {
			data, _, err := encodeFrame(bt, 1<<30)
			if err != nil {
				b.Fatal(err)
			}
			n = len(data)
			putSpoolBuf(data)
		}
		b.ReportMetric(float64(n)/float64(calls), "file_B/call")
	})
	// The frame's CRC-32C alone, over the bytes it covers: what the
	// checksum adds to encoding, and to decoding, a 512-call batch.
	b.Run("crc32c", func(b *testing.B) {
		data, _, err := encodeFrame(bt, 1<<30)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			crc32.Update(crc32.Checksum(data[:frameSumAt], castagnoli), castagnoli, data[frameHeaderLen:])
		}
	})
	b.Run("gob", func(b *testing.B) {
		b.ReportAllocs()
		var n int
		for b.Loop() {
			var buf bytes.Buffer
			if err := gob.NewEncoder(&buf).Encode(bt); err != nil {
				b.Fatal(err)
			}
			n = buf.Len()
		}
		b.ReportMetric(float64(n)/float64(calls), "file_B/call")
	})
}

// TestGather_CorruptFile: a spool file of an earlier release cut short, or a version 1 file
// (no checksum: what an earlier release left) broken in its S2 block or in
// the batch encoding inside, is an error naming the file when it is the
// first to drain, the batches before it still drain merged, and
// none after it is read past: nothing is dropped unsaid, and the drain can
// move the one file aside.
func TestGather_CorruptFile(t *testing.T) {
	raw := appendBatch(nil, testBatch("c_2"))
	for _, tc := range []struct {
		name    string
		corrupt func(data []byte) []byte
	}{
		{"cut", func(d []byte) []byte { return d[:len(d)-3] }},
		{"magic_only", func(d []byte) []byte { return d[:len(spoolMagic)] }},
		{"huge_length", func(d []byte) []byte {
			return append([]byte(spoolMagicV1+"\xff\xff\xff\xff\x0f"), raw...)
		}},
		{"batch_cut_inside_s2", func([]byte) []byte {
			return append([]byte(spoolMagicV1), s2.Encode(nil, raw[:len(raw)/2])...)
		}},
		{"batch_with_trailing_bytes", func([]byte) []byte {
			return append([]byte(spoolMagicV1), s2.Encode(nil, append(slices.Clone(raw), 1, 2))...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeOldSpool(t, dir, encodeFrameCopy(t, testBatch("c_1")), tc.corrupt(encodeFrameCopy(t, testBatch("c_2"))), encodeFrameCopy(t, testBatch("c_3")))
			sp := mustOpenSpool(t, dir)
			seqs := sp.first(64)
			path := sp.path(seqs[1], spoolExt)
			s := &Store{spool: sp, opts: Options{BatchSize: 100}}
			b, used, err := s.gather(sp.first(64), false)
			if err != nil || !slices.Equal(used, seqs[:1]) || len(b.Calls) != 1 || b.Calls[0].ID != "c_1" {
				t.Fatalf("gather before the broken file = %v, %v; want the first batch alone", used, err)
			}
			if err := sp.remove(seqs[0]); err != nil {
				t.Fatal(err)
			}
			_, used, err = s.gather(sp.first(64), false)
			if !errors.Is(err, errSpoolCorrupt) || !slices.Equal(used, seqs[1:2]) || !strings.Contains(err.Error(), path) {
				t.Fatalf("gather of the broken file = %v, %v; want an error naming %s", used, err, path)
			}
			if _, err := sp.reject(seqs[1]); err != nil {
				t.Fatal(err)
			}
			b, used, err = s.gather(sp.first(64), false)
			if err != nil || !slices.Equal(used, seqs[2:]) || len(b.Calls) != 1 || b.Calls[0].ID != "c_3" {
				t.Fatalf("gather after the broken file = %v, %v; want the last batch", used, err)
			}
		})
	}
}

// BenchmarkSpoolDecode measures what the drain spends reading a spooled
// 512-call batch back from its file (in the page cache): checksum, S2 and
// the spool's codec.
func BenchmarkSpoolDecode(b *testing.B) {
	bt := benchBatch(b, 512)
	sp, err := openSpool(b.TempDir(), 1<<30, 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := sp.append(bt); err != nil {
		b.Fatal(err)
	}
	seq := sp.first(1)[0]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sp.decode(seq); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSpoolAppend measures what an acknowledgement with Ack "log"
// waits for in the spool: encoding a 512-call batch and making it durable,
// with 1, 2 and 8 appenders at once (serve's inserters and its concurrent
// requests). ns/op is per batch over all appenders; ack_p50_ms and
// ack_p99_ms are one append's wait.
func BenchmarkSpoolAppend(b *testing.B) {
	bt := benchBatch(b, 512)
	for _, appenders := range []int{1, 2, 8} {
		b.Run(fmt.Sprint("appenders=", appenders), func(b *testing.B) {
			sp, err := openSpool(b.TempDir(), 1<<40, 0)
			if err != nil {
				b.Fatal(err)
			}
			var mu sync.Mutex
			lat := make([]time.Duration, 0, b.N)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range appenders {
				wg.Go(func() {
					var mine []time.Duration
					for next.Add(1) <= int64(b.N) {
						t0 := time.Now()
						if err := sp.append(bt); err != nil {
							b.Error(err)
							return
						}
						mine = append(mine, time.Since(t0))
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				})
			}
			wg.Wait()
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ack_p50_ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ack_p99_ms")
		})
	}
}

// benchBatch is a sealed batch of n calls of the benchmark pool, as the
// store spools a request's calls.
func benchBatch(b *testing.B, n int) *batch {
	pool := benchPool(b, n)
	var rows []callRow
	for i := range pool {
		r := fresh(pool[i], uint64(i))
		row, err := callRowOf(&r)
		if err != nil {
			b.Fatal(err)
		}
		rows = append(rows, row)
	}
	bt := new(batch)
	bt.addCalls(rows)
	bt.seal()
	return bt
}

// TestStore_TooLargeForSpool: with Ack "log" every batch passes the spool,
// so one request larger than spool.max_bytes never fits: AppendCalls fails
// with audit.ErrTooLarge (not retryable), naming the setting and both
// sizes. With Ack "insert" the spool only stands in while ClickHouse is
// unreachable and the same request is inserted once it is back: there it
// stays audit.ErrUnavailable. No server is needed: neither reaches it.
func TestStore_TooLargeForSpool(t *testing.T) {
	rec := func(i int) audit.Record {
		var args []byte
		for j := uint64(0); len(args) < 4000; j++ {
			args = fmt.Appendf(args, "%016x", splitmix(j^uint64(i)<<32))
		}
		return audit.Record{Call: &audit.Call{ID: fmt.Sprintf("c_%d", i), Time: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC), Server: "thegram", Arguments: args}}
	}
	var big []audit.Record
	for i := range 40 { // about 160 KB that does not compress
		big = append(big, rec(i))
	}
	for _, tc := range []struct {
		ack  string
		want error
	}{{AckLog, audit.ErrTooLarge}, {AckInsert, audit.ErrUnavailable}} {
		t.Run(tc.ack, func(t *testing.T) {
			o := NewDefaultOptions()
			o.DSN = "clickhouse://127.0.0.1:1/default?dial_timeout=200ms"
			o.Ack = tc.ack
			o.RetryFor = 0
			o.Spool.Dir = t.TempDir()
			o.Spool.MaxBytes = 64 << 10
			o.BatchAge = 5 * time.Millisecond
			o.Logger = testLogger(t)
			s, err := Open(t.Context(), o)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			_, err = s.AppendCalls(t.Context(), big)
			if !errors.Is(err, tc.want) || (tc.want == audit.ErrTooLarge) == errors.Is(err, audit.ErrUnavailable) {
				t.Fatalf("AppendCalls of 160 KB with a spool of 64 KiB = %v, want %v only", err, tc.want)
			}
			if !strings.Contains(err.Error(), "more than the spool's limit of 65536") || !strings.Contains(err.Error(), "(spool.max_bytes)") {
				t.Errorf("refusal %q: want the setting and both sizes", err)
			}
			if _, err := s.AppendCalls(t.Context(), big[:1]); err != nil {
				t.Errorf("a request that fits, after the refusal: %v", err)
			}
		})
	}
}
