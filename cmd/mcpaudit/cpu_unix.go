//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time this process used so far, user and
// system; zero where it cannot tell.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
