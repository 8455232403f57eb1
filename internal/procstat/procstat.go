// Package procstat reads what the running process has used so far: CPU
// time, bytes written, resident memory. Benchmarks and the load generator
// report figures a call from differences of these; on a shared machine CPU
// time moves less with what else runs than the wall clock does.
package procstat

import (
	"os"
	"strconv"
	"strings"
)

// Written is what the process has passed to write calls so far (wchar of
// /proc/self/io), 0 where that is not available.
func Written() int64 { return procValue("/proc/self/io", "wchar:") }

// Resident is the process's resident set in bytes (VmRSS of
// /proc/self/status), 0 where that is not available.
func Resident() int64 { return procValue("/proc/self/status", "VmRSS:") << 10 }

// procValue returns the number after prefix in a line of file, a /proc
// file, its unit (" kB") dropped; 0 where there is none.
func procValue(file, prefix string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
