//go:build !unix

package main

import "time"

// processCPU returns zero: this system's CPU time is not read.
func processCPU() time.Duration { return 0 }
