package audit

import "time"

// Downtime is a time serve was down: from its previous run's last save of
// its state file (its clean stop, or up to 10 s before a crash) to the
// start after it. Calls sent meanwhile reach serve only from senders that
// kept them and sent them again.
type Downtime struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// End is how the run before it ended: EndStop, EndCrash or EndUnknown.
	End string `json:"end"`
}

// How a run of serve ended, in Downtime.End.
const (
	// EndStop is a clean stop: the run committed its output and saved its
	// state file as it stopped (SIGTERM, SIGINT).
	EndStop = "stop"
	// EndCrash is a run that did not make its final save: killed (kill
	// -9, the OOM killer), crashed, the host lost, or unable to commit at
	// its stop.
	EndCrash = "crash"
	// EndUnknown is a run of a release that did not record how it ended.
	EndUnknown = "unknown"
)

// Overlaps reports whether d overlaps the range [from, to]; a zero bound
// is open.
func (d Downtime) Overlaps(from, to time.Time) bool {
	return (to.IsZero() || d.From.Before(to)) && (from.IsZero() || d.To.After(from))
}

// DowntimesIn returns those of ds that overlap [from, to] (a zero bound is
// open), in the order of ds.
func DowntimesIn(ds []Downtime, from, to time.Time) []Downtime {
	var in []Downtime
	for _, d := range ds {
		if d.Overlaps(from, to) {
			in = append(in, d)
		}
	}
	return in
}
