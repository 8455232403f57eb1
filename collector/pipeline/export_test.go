package pipeline

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
