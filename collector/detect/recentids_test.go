package detect

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestRecentIDs: the blocks remember exactly the last n ids taken, as a
// map and a ring of them do, through many evictions, blocks forgotten and
// filled again, and searches in old blocks: ids come back in time order
// and out of it, each with its time, as a call's id is dated by its time.
func TestRecentIDs(t *testing.T) {
	for _, c := range []struct{ n, size int }{{1, 1}, {1, 4}, {3, 2}, {3, 8}, {8, 3}, {100, 7}, {100, 1000}, {64, 16}} {
		for _, ordered := range []bool{false, true} {
			name := fmt.Sprintf("n=%d/size=%d/ordered=%v", c.n, c.size, ordered)
			r := newRecentIDs(c.n, c.size)
			ring := make([]string, 0, c.n)
			set := map[string]bool{}
			rng := rand.New(rand.NewPCG(uint64(c.n), uint64(c.size)))
			for i := 0; i < 20000; i++ {
				// Ordered, ids (and their times) mostly grow, and some come
				// back from up to 3n ids before; otherwise any comes, any time.
				k := rng.IntN(3*c.n + 2)
				if ordered {
					k = max(0, i/2-k)
				}
				id, ms := fmt.Sprintf("c_%d", k), int64(k*7919%5000)
				if ordered {
					ms = int64(k)
				}
				want := !set[id]
				if got := r.add("t", id, ms); got != want {
					t.Fatalf("%s step %d: add(%s) = %v, want %v", name, i, id, got, want)
				}
				if want {
					if len(ring) == c.n {
						delete(set, ring[0])
						ring = ring[1:]
					}
					ring = append(ring, id)
					set[id] = true
				}
				if r.count != len(set) {
					t.Fatalf("%s step %d: %d ids counted, %d remembered", name, i, r.count, len(set))
				}
				if held := len(r.blocks); held > (c.n+c.size-1)/c.size+1 {
					t.Fatalf("%s step %d: %d blocks held for %d ids", name, i, held, c.n)
				}
			}
		}
	}
	if r := newRecentIDs(4, 2); !r.add("t", "", 1) || !r.add("t", "", 1) {
		t.Fatal("an empty id is never a duplicate")
	}
	if r := newRecentIDs(4, 2); !r.add("a", "c_1", 1) || !r.add("b", "c_1", 1) || r.add("a", "c_1", 1) {
		t.Fatal("an id is another tenant's call, and the same tenant's again")
	}
}
