package sqlite

import (
	"fmt"
	"testing"
)

// TestIDIndex_OffHeapWithinBudget: what pebble holds in memtables and in
// its block cache, after enough calls to fill and flush several memtables
// and after lookups, stays within IDIndexOffHeapMiB, which serve takes out
// of the eighth of memory_limit left outside the Go heap. (Measured
// 2026-12-02: 4 MiB of memtable and 4 MiB kept for reuse, reserved out of
// the 8 MiB block cache, which the lookups here then miss every time.)
func TestIDIndex_OffHeapWithinBudget(t *testing.T) {
	if IDIndexOffHeapMiB == 0 {
		t.Skip("built without cgo: pebble's buffers are Go heap, under the runtime's limit")
	}
	s := openTemp(t, Options{})
	defer s.Close()
	const n = 300_000 // about 20 MB of memtable entries: several flushes
	id := func(rid int64) string { return fmt.Sprintf("c_%020x", splitmix(uint64(rid))) }
	calls := make([]indexedCall, 0, 1000)
	for rid := int64(1); rid <= n; rid++ {
		calls = append(calls, indexedCall{id: id(rid), tenant: 1, rid: rid})
		if len(calls) == cap(calls) {
			s.ids.add(s.w, calls)
			calls = calls[:0]
		}
	}
	if s.ids.failures.Load() > 0 || s.ids.mark.Load() != n {
		t.Fatalf("indexed through %d with %d failures, want %d and none", s.ids.mark.Load(), s.ids.failures.Load(), n)
	}
	for rid := int64(1); rid <= n; rid += 101 {
		rids, _, err := s.ids.lookup([]any{id(rid)})
		if err != nil || len(rids) != 1 || rids[0] != rid {
			t.Fatalf("lookup of call %d: %v, %v", rid, rids, err)
		}
	}
	m := s.ids.db.Metrics()
	held := int64(m.MemTable.Size+m.MemTable.ZombieSize) + m.BlockCache.Size
	t.Logf("memtables %d KiB (%d, zombie %d KiB), block cache %d KiB (%d hits, %d misses), flushes %d",
		m.MemTable.Size>>10, m.MemTable.Count, m.MemTable.ZombieSize>>10, m.BlockCache.Size>>10, m.BlockCache.Hits, m.BlockCache.Misses, m.Flush.Count)
	if m.Flush.Count < 2 {
		t.Errorf("%d flushes: the calls did not fill the memtables", m.Flush.Count)
	}
	if held > IDIndexOffHeapMiB<<20 {
		t.Errorf("the id index holds %d KiB in memtables and block cache, more than IDIndexOffHeapMiB (%d MiB)", held>>10, IDIndexOffHeapMiB)
	}
}
