//go:build !(linux || darwin || freebsd)

package sqlite

// freeBytes cannot read the free space here: a disk found full is ready
// again only once a write as large succeeds.
func freeBytes(string) (int64, bool) { return 0, false }
