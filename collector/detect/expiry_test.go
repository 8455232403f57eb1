package detect

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestExpiry: keys come out in time order, in order or not when pushed,
// and exactly those before the horizon.
func TestExpiry(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var e expiry[int]
	base := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	var want []int
	clock := 0
	for round := 0; round < 50; round++ {
		for i := 0; i < 200; i++ {
			clock += r.IntN(3)
			at := clock
			if r.IntN(10) == 0 {
				at -= r.IntN(100) // late
			}
			e.push(at, etimeOf(base.Add(time.Duration(at)*time.Second)))
			want = append(want, at)
		}
		horizon := clock - 150
		slices.Sort(want)
		var got []int
		for {
			k, at, ok := e.popBefore(etimeOf(base.Add(time.Duration(horizon) * time.Second)))
			if !ok {
				break
			}
			if !at.Equal(etimeOf(base.Add(time.Duration(k) * time.Second))) {
				t.Fatalf("key %d came with time %v", k, at)
			}
			got = append(got, k)
		}
		n := 0
		for n < len(want) && want[n] < horizon {
			n++
		}
		if !slices.Equal(got, want[:n]) {
			t.Fatalf("round %d: popped %v, want %v", round, got, want[:n])
		}
		want = want[n:]
		if e.Len() != len(want) {
			t.Fatalf("round %d: %d queued, want %d", round, e.Len(), len(want))
		}
	}
}
