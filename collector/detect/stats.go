package detect

import (
	"fmt"

	"github.com/mcpaudit/mcpaudit/audit"
)

// Stats counts what the engine processed, for summaries.
type Stats struct {
	Calls      int64
	Outcomes   map[audit.Outcome]int64
	Writes     map[audit.WriteState]int64 // current state of every write
	Failures   map[audit.RetryAction]map[string]int64
	Findings   map[audit.Kind]int64
	Duplicates int64
	// Collisions counts the duplicates that were id collisions: another
	// exchange under the span ids of one taken, or another response under
	// its call id (Collision).
	Collisions int64
	// Late counts calls judged behind their partition's watermark; TooLate
	// those beyond the allowed lateness, stored but not judged.
	Late, TooLate int64
	// Ahead counts calls dated beyond the allowed clock skew.
	Ahead int64
	// Withdrawn counts findings taken back: an unverified_write whose write
	// a call dated within its window, judged after it closed, settled, or
	// an unverified_write or unsafe_retry made from a call judged without
	// the response its late answer gave (Findings no longer counts them).
	Withdrawn int64
	// LateAnswers counts answers of calls judged without one, taken within
	// the allowed lateness (counted among Duplicates too: a second
	// observation of the exchange).
	LateAnswers int64
}

func newStats() Stats {
	return Stats{
		Outcomes: map[audit.Outcome]int64{},
		Writes:   map[audit.WriteState]int64{},
		Failures: map[audit.RetryAction]map[string]int64{},
		Findings: map[audit.Kind]int64{},
	}
}

func (s *Stats) call(r *audit.Record) {
	s.Calls++
	s.Outcomes[r.Outcome]++
	add := func(f *audit.Failure) {
		m := s.Failures[f.Action]
		if m == nil {
			m = map[string]int64{}
			s.Failures[f.Action] = m
		}
		m[f.Code]++
	}
	if r.Failure != nil {
		add(r.Failure)
	}
	for i := range r.Ops {
		if f := r.Ops[i].Failure; f != nil && f != r.Failure {
			add(f)
		}
	}
}

func (s *Stats) write(state, prev audit.WriteState) {
	if prev != "" {
		s.Writes[prev]--
	}
	s.Writes[state]++
}

var sprintf = fmt.Sprintf

// hhmmss renders an event time for summaries.
func hhmmss(t etime) string { return t.Time().Format("2006-01-02 15:04:05.000Z") }

func keyPhrase(k string) string {
	if k == "" {
		return "no idempotency key"
	}
	return "key " + k
}

func callIDs(ids ...string) []string { return ids }

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// Oddlynew provider calls the rules name.
const (
	toolCreate  = "documents.createDocument"
	toolApply   = "organizations.applyDocumentCopy"
	toolReceipt = "organizations.getDocumentCopyReceipt"
)
