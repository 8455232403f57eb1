package detect

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestExpMap_Collisions: keys whose hashes collide stay apart. The map is
// driven with a hash that files every key under one of three values, and
// compared at every step with a Go map of the keys themselves: what get
// finds, what at creates, what a sweep drops, and len.
func TestExpMap_Collisions(t *testing.T) {
	for _, name := range []string{"collide", "distinct"} {
		t.Run(name, func(t *testing.T) {
			hash := func(k keyID) uint64 { return uint64(len(k.key) % 3) }
			if name == "distinct" {
				hash = hashKey
			}
			e := newExpMap[keyID, int](hash)
			want := map[keyID]struct {
				v    int
				last etime
			}{}
			rng := rand.New(rand.NewPCG(1, 2))
			key := func() keyID {
				kinds := []string{"request_id", "operationId"}
				return keyID{kinds[rng.IntN(2)], fmt.Sprintf("k%d", rng.IntN(40))}
			}
			now := etime(0)
			for step := range 4000 {
				now += etime(rng.IntN(3)) * etime(1e9)
				switch k := key(); rng.IntN(4) {
				case 0, 1:
					v := e.at(k, now)
					*v += step
					w := want[k]
					w.v += step
					w.last = now
					want[k] = w
				case 2:
					v := e.get(k)
					w, ok := want[k]
					if (v != nil) != ok || v != nil && *v != w.v {
						t.Fatalf("step %d: get(%v) = %v, want %v (present %v)", step, k, v, w.v, ok)
					}
				case 3:
					horizon := now - 20e9
					e.sweep(horizon, func(k keyID, v *int) (bool, etime) {
						w := want[k]
						if *v != w.v {
							t.Fatalf("step %d: sweep saw %v = %d, want %d", step, k, *v, w.v)
						}
						return !w.last.Before(horizon), w.last
					})
					for k, w := range want {
						if w.last.Before(horizon) {
							delete(want, k)
						}
					}
				}
				if e.len() != len(want) {
					t.Fatalf("step %d: len %d, want %d", step, e.len(), len(want))
				}
			}
			if name == "collide" && len(e.spill) == 0 {
				t.Fatal("no key went to spill: the test does not exercise collisions")
			}
		})
	}
}
