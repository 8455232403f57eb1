package pipeline

// KnownFindings returns how many finding ids the gate keeps to recognize
// findings stored before a restart.
func KnownFindings(p *Pipeline) int { return int(p.gate.knownLen.Load()) }
