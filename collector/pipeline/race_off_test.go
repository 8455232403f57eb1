//go:build !race

package pipeline_test

// raceEnabled is true in a test binary built with -race (scripts/test.sh's
// second pass over the concurrent packages).
const raceEnabled = false
