package pipeline

import "time"

// KnownFindings returns how many finding ids the gate keeps to recognize
// findings stored before a restart.
func KnownFindings(p *Pipeline) int { return int(p.gate.knownLen.Load()) }

// SetMaxSeedCalls sets the bound on the calls of freed partitions the
// replay holds, and returns a func that puts it back.
func SetMaxSeedCalls(n int) func() {
	old := maxSeedCalls
	maxSeedCalls = n
	return func() { maxSeedCalls = old }
}

// SetTicks has the engine goroutine of a pipeline made with c commit and
// move its watermarks with the wall clock at each value sent on ticks, in
// place of its CommitEvery ticker: a test sends one between two steps.
func SetTicks(c *Config, ticks <-chan time.Time) { c.ticks = ticks }

// StateCurrent returns the wall time the engine last found the state file
// to hold its marks: written then, or unchanged since it was (the file is
// not rewritten for that alone within stateRefresh, so StateSaved may stay
// behind a test's clock that moved a second with nothing changed).
func StateCurrent(p *Pipeline) time.Time {
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	return p.marksCurrent
}
