package detect

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestRecentIDs: the table remembers exactly the last n ids taken, as a
// map and a ring of them do, through many evictions and collisions of
// slots (a table of 16 slots for 8 ids).
func TestRecentIDs(t *testing.T) {
	for _, n := range []int{1, 3, 8, 100} {
		r := newRecentIDs(n)
		ring := make([]string, 0, n)
		set := map[string]bool{}
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		for i := 0; i < 20000; i++ {
			id := fmt.Sprintf("c_%d", rng.IntN(3*n+2))
			want := !set[id]
			if got := r.add("t", id); got != want {
				t.Fatalf("n=%d step %d: add(%s) = %v, want %v", n, i, id, got, want)
			}
			if want {
				if len(ring) == n {
					delete(set, ring[0])
					ring = ring[1:]
				}
				ring = append(ring, id)
				set[id] = true
			}
			filled := 0
			for _, h := range r.table {
				if h != 0 {
					filled++
				}
			}
			if filled != len(set) {
				t.Fatalf("n=%d step %d: %d hashes in the table, %d ids remembered", n, i, filled, len(set))
			}
		}
	}
	if r := newRecentIDs(4); !r.add("t", "") || !r.add("t", "") {
		t.Fatal("an empty id is never a duplicate")
	}
	if r := newRecentIDs(4); !r.add("a", "c_1") || !r.add("b", "c_1") || r.add("a", "c_1") {
		t.Fatal("an id is another tenant's call, and the same tenant's again")
	}
}
