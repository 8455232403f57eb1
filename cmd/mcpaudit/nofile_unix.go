//go:build unix

package main

import "syscall"

// openFilesLimit raises the soft limit on open files (RLIMIT_NOFILE) to
// the hard one, as Go's runtime does at start on Linux (not on every
// system), and returns the limit the process then has; ok is false when it
// cannot tell.
func openFilesLimit() (limit uint64, ok bool) {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil {
		return 0, false
	}
	if rl.Cur < rl.Max {
		raised := rl
		raised.Cur = rl.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			rl = raised
		}
	}
	return uint64(rl.Cur), true
}
