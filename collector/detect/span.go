package detect

import "time"

// Span is an event-time span, [From, To]. Its zero value holds nothing.
type Span struct{ From, To time.Time }

// Add widens s to hold t.
func (s *Span) Add(t time.Time) {
	if s.From.IsZero() || t.Before(s.From) {
		s.From = t
	}
	if t.After(s.To) {
		s.To = t
	}
}

// Merge widens s to hold o; an empty o leaves s as it is.
func (s *Span) Merge(o Span) {
	if o.Empty() {
		return
	}
	s.Add(o.From)
	s.Add(o.To)
}

// Empty reports whether s holds nothing.
func (s Span) Empty() bool { return s.From.IsZero() }
