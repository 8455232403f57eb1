//go:build cgo

package sqlite

// IDIndexOffHeapMiB is the memory, in MiB, the id index may hold outside
// the Go heap, where the runtime's memory limit does not see it: built with
// cgo, pebble allocates its block cache and memtables with C's calloc.
// Pebble reserves its memtables out of the block cache's capacity, so the
// two together hold the larger of the cache and the memtables: two of
// them, the one written and the last one flushed, kept for reuse
// (measured: 4 MiB live and 4 MiB kept, which leave the 8 MiB cache no
// room for blocks; TestIDIndex_OffHeapWithinBudget).
const IDIndexOffHeapMiB = max(idsCacheBytes, 2*idsMemTableBytes) >> 20
