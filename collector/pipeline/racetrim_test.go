package pipeline_test

import "testing"

// onlyOnceUnderRace skips a case of a test's matrix in the race detector's
// pass unless first is true: the matrices of the restart tests below drive
// the pipeline one call at a time (thousands of synchronous commits), which
// the race detector slows about fourfold, and their other cases run the same
// goroutines on other data. Every case still runs in the plain pass
// (`go test ./...`); the race pass keeps one case of each matrix, so that the
// code paths stay under the detector.
func onlyOnceUnderRace(t *testing.T, first bool) {
	t.Helper()
	if raceEnabled && !first {
		t.Skip("one case of this matrix runs under -race; every case runs without it")
	}
}
