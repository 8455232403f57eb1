//go:build unix

package procstat

import (
	"syscall"
	"time"
)

// CPU returns the CPU time this process used so far, user and system;
// zero where it cannot tell.
func CPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
