package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestChunkEnd(t *testing.T) {
	calls := func(sizes ...int) *batch {
		b := &batch{}
		for _, n := range sizes {
			b.Calls = append(b.Calls, callRow{Arguments: strings.Repeat("a", n)})
		}
		return b
	}
	f := func(b *batch, table, lo, want int) {
		t.Helper()
		if got := b.chunkEnd(table, lo); got != want {
			t.Errorf("chunkEnd(%d, %d) of %d calls, %d writes = %d, want %d", table, lo, len(b.Calls), len(b.Writes), got, want)
		}
	}
	mib := 1 << 20
	// A block ends with the row that takes its texts to insertBlockBytes.
	f(calls(mib, mib-1, 1, mib, 5), tCalls, 0, 3)
	f(calls(mib, mib-1, 1, mib, 5), tCalls, 3, 5)
	f(calls(3*mib, 10), tCalls, 0, 1)
	// Small rows: insertBlockRows at most.
	small := calls(make([]int, insertBlockRows+10)...)
	f(small, tCalls, 0, insertBlockRows)
	f(small, tCalls, insertBlockRows, insertBlockRows+10)
	// The other tables by rows only.
	w := &batch{Writes: make([]writeRow, insertBlockRows*2+1)}
	f(w, tWrites, 0, insertBlockRows)
	f(w, tWrites, 2*insertBlockRows, 2*insertBlockRows+1)
}

// TestInsert_BlocksOnePart inserts a batch whose calls take several blocks
// (chunkEnd) and checks that every row arrives whole, once, and that the
// server made one part of the INSERT, as it does of one block: the blocks
// bound the client's buffers, not the size of the parts.
func TestInsert_BlocksOnePart(t *testing.T) {
	o := testOptions(t)
	o.BatchSize = 100_000
	s := openStore(t, o)
	defer s.Close()
	const n = 2000
	recs := synthCalls(t, n, time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC), "blocks")
	for i := range recs {
		c := *recs[i].Call
		c.Arguments = fmt.Appendf(nil, `{"path":"big/%d.gram","text":%q}`, i, strings.Repeat(string(rune('a'+i%26)), 3000))
		recs[i].Call = &c
	}
	rows, err := callRows(recs)
	if err != nil {
		t.Fatal(err)
	}
	b := &batch{}
	b.takeCalls(rows)
	blocks := 0
	for lo := 0; lo < n; lo = b.chunkEnd(tCalls, lo) {
		blocks++
	}
	if blocks < 3 {
		t.Fatalf("the calls make %d blocks; the test needs several", blocks)
	}
	if _, err := s.AppendCalls(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	wantRows(t, o, "calls", "id", n)
	conn := rawConn(t, o.DSN)
	defer conn.Close()
	// Level 0: the parts inserts made, active or merged away since.
	if parts := count(t, conn, "SELECT count() FROM system.parts WHERE level = 0 AND database = '"+o.Database+"' AND table = 'calls'"); parts != 1 {
		t.Errorf("one insert of %d blocks made %d parts of calls, want 1", blocks, parts)
	}
	for _, i := range []int{0, n / 3, n / 2, n - 1} {
		q := fmt.Sprintf("SELECT count() FROM %s.calls WHERE id = '%s' AND arguments = '%s'", o.Database, recs[i].Call.ID, strings.ReplaceAll(string(recs[i].Call.Arguments), `"`, `\"`))
		if got := count(t, conn, q); got != 1 {
			t.Errorf("call %d: %d rows with its arguments as sent, want 1", i, got)
		}
	}
}
