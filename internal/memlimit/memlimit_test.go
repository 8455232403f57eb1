package memlimit

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestOver_GarbageCollected: a heap over its share with garbage alone,
// and nothing allocating after it, is over once; the collection Over
// starts frees it, and the check after says so. Before Over started one,
// the heap stayed over until something allocated or Go's forced
// collection two minutes later (every request refused meanwhile).
func TestOver_GarbageCollected(t *testing.T) {
	runtime.GC()
	const limit = 256 << 20
	old := debug.SetMemoryLimit(limit)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	if Over(0.5) {
		t.Fatalf("over half of %d bytes before any garbage", limit)
	}
	// 160 MiB live, then dropped: garbage above half the limit, below
	// the limit, where the collector has no reason to run.
	keep := make([][]byte, 0, 160)
	for range 160 {
		keep = append(keep, make([]byte, 1<<20))
	}
	sink = keep
	sink = nil
	keep = nil
	if !Over(0.5) {
		t.Skip("the collector already ran after the allocation; nothing to show")
	}
	deadline := time.Now().Add(10 * time.Second)
	for Over(0.5) {
		if time.Now().After(deadline) {
			t.Fatalf("the heap stayed over half the limit for 10 s with garbage alone (%d collections started)", collected.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if collected.Load() == 0 {
		t.Fatal("the heap came under without a collection Over started")
	}
}

var sink [][]byte

// TestOver_CollectionsBounded: checks in a tight loop start at most one
// collection a second.
func TestOver_CollectionsBounded(t *testing.T) {
	before, last := collected.Load(), lastCollect.Load()
	t.Cleanup(func() { lastCollect.Store(last) })
	now := time.Now().Add(time.Hour)
	for i := range 1000 {
		collect(now.Add(time.Duration(i) * time.Millisecond))
	}
	// 1000 calls over 1 s of clock: the first, perhaps one at the end.
	if n := collected.Load() - before; n < 1 || n > 2 {
		t.Fatalf("%d collections started in one second of checks, want 1 or 2", n)
	}
}

// TestOver_NoLimit: without a memory limit nothing is ever over.
func TestOver_NoLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	debug.SetMemoryLimit(1<<63 - 1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	if Over(0) {
		t.Fatal("over with no limit")
	}
}
