//go:build !cgo

package sqlite

// IDIndexOffHeapMiB is the memory, in MiB, the id index may hold outside
// the Go heap: none when built without cgo (the release image), where
// pebble allocates its block cache and memtables in the Go heap, which the
// runtime's memory limit sees.
const IDIndexOffHeapMiB = 0
