//go:build cgo

package sqlite

// IDIndexOffHeapMiB is the memory, in MiB, the id index may hold outside
// the Go heap, where the runtime's memory limit does not see it: built with
// cgo, pebble allocates its block cache and memtables with C's calloc. Two
// memtables: the one written, and the last one flushed, which pebble keeps
// to reuse (measured: 4 MiB live and 4 MiB kept after 100,000 calls).
const IDIndexOffHeapMiB = (idsCacheBytes + 2*idsMemTableBytes) >> 20
