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
	if st.Files > 0 && st.Ffree == 0 {
		// Out of inodes: no new file (a tenant's call log, its next
		// segment) fits, whatever the bytes free (adv51: /readyz said
		// ready while every call was refused for ENOSPC).
		return 0, true
	}
	return int64(uint64(st.Bavail) * uint64(st.Bsize)), true
}
