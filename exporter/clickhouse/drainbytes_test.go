package clickhouse

import (
	"fmt"
	"strings"
	"testing"
)

// textBatch is a spooled batch of n calls, each with about size bytes of
// arguments.
func textBatch(tag string, n, size int) *batch {
	rows := make([]callRow, n)
	for i := range rows {
		rows[i] = callRow{ID: fmt.Sprintf("%s-%d", tag, i), Tenant: "acme", Time: int64(1000 + i),
			Arguments: strings.Repeat("x", size), Flags: flagArguments}
	}
	b := new(batch)
	b.addCalls(rows)
	b.seal()
	return b
}

// TestDrainBytes checks that DrainBytes bounds, by the calls' texts, the
// batches the drain merges into one insert and those the spool keeps in
// memory for it, where four batch sizes of rows alone would take them all.
func TestDrainBytes(t *testing.T) {
	const perBatch = 100 * 10_000 // 100 calls of 10,000 bytes of arguments
	for _, tc := range []struct {
		drainBytes int64
		merged     int // batches merged into the first insert
		kept       int // batches kept in memory
	}{
		{0, 5, 5},
		{perBatch*5/2 + 1000, 2, 2},
		{perBatch / 2, 1, 0}, // a batch larger than the bound still goes, alone
	} {
		t.Run(fmt.Sprint(tc.drainBytes), func(t *testing.T) {
			sp, err := openSpool(t.TempDir(), 1<<30, 4*1000)
			if err != nil {
				t.Fatal(err)
			}
			sp.KeepBytes(tc.drainBytes, (*batch).textBytes)
			for i := range 5 {
				b := textBatch(fmt.Sprint("b", i), 100, 10_000)
				if got := b.textBytes(); got < perBatch || got > perBatch+100*64 {
					t.Fatalf("batch texts %d bytes, want about %d", got, perBatch)
				}
				if err := sp.append(b); err != nil {
					t.Fatal(err)
				}
			}
			if st := sp.State(); st.Kept != tc.kept {
				t.Errorf("kept %d batches in memory, want %d", st.Kept, tc.kept)
			}
			s := &Store{spool: sp, opts: Options{BatchSize: 1000, DrainBytes: tc.drainBytes}}
			b, used, err := s.gather(sp.first(64), false)
			if err != nil {
				t.Fatal(err)
			}
			if len(used) != tc.merged || len(b.Calls) != 100*tc.merged {
				t.Errorf("merged %d batches, %d calls; want %d batches", len(used), len(b.Calls), tc.merged)
			}
			// Forgetting a kept batch gives its bytes back.
			for _, seq := range used {
				if err := sp.remove(seq); err != nil {
					t.Fatal(err)
				}
			}
			if st := sp.State(); st.Kept == 0 && st.KeptBytes != 0 {
				t.Errorf("nothing kept, %d bytes counted", st.KeptBytes)
			}
		})
	}
}
