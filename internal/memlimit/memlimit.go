// Package memlimit tells whether the heap is near the process's memory
// limit (GOMEMLIMIT, or serve.memory_limit through debug.SetMemoryLimit),
// the test serve's receiver and engine make before they take more calls.
//
// The heap it reads counts objects the garbage collector has not freed
// yet. Under a memory limit the collector runs when the heap nears the
// limit, not when it passes a share of it, so after a burst the heap can
// sit above the share with garbage for as long as nothing allocates:
// every request refused, refusals allocating almost nothing, until Go's
// forced collection two minutes later (flk46, 2026-12-07). So when the
// heap is over, Over starts a collection in the background, at most one
// at a time and one a second: the request that saw it is refused as
// before, and the next one finds the garbage gone or the heap really full.
package memlimit

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// collectEvery is the least time between two collections Over starts.
const collectEvery = time.Second

var (
	collecting  atomic.Bool
	lastCollect atomic.Int64 // UnixNano of the last collection started
	// collected counts the collections started, for tests.
	collected atomic.Int64
)

// Over reports whether the heap's objects take more than share of the
// memory limit. Without a limit it is never. When over, it starts a
// garbage collection in the background unless one is running or one
// started less than a second ago.
func Over(share float64) bool {
	limit := debug.SetMemoryLimit(-1)
	if limit <= 0 || limit == math.MaxInt64 {
		return false
	}
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return false
	}
	if float64(s[0].Value.Uint64()) <= share*float64(limit) {
		return false
	}
	collect(time.Now())
	return true
}

// collect starts runtime.GC in a goroutine of its own, at most one at a
// time and one per collectEvery.
func collect(now time.Time) {
	if now.UnixNano()-lastCollect.Load() < int64(collectEvery) || !collecting.CompareAndSwap(false, true) {
		return
	}
	lastCollect.Store(now.UnixNano())
	collected.Add(1)
	go func() {
		defer collecting.Store(false)
		runtime.GC()
	}()
}
