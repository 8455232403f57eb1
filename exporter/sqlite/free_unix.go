//go:build linux || darwin || freebsd

package sqlite

import "syscall"

// freeBytes is the space left for an unprivileged writer on the file
// system of dir; known is false when it cannot be read.
func freeBytes(dir string) (free int64, known bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(uint64(st.Bavail) * uint64(st.Bsize)), true
}
