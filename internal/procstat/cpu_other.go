//go:build !unix

package procstat

import "time"

// CPU returns zero: this system's CPU time is not read.
func CPU() time.Duration { return 0 }
