package detect

import "time"

// etime is an event time kept in correlation state: nanoseconds since the
// Unix epoch, 0 for none. It takes 8 bytes where a time.Time takes 24,
// and state holds several per write. Event times are bounded to years
// 1678–2261 before they reach the engine (the range of int64 nanoseconds);
// a time outside it is pinned to the nearest end.
type etime int64

// etimeOf returns the event time of t; the zero time is 0.
func etimeOf(t time.Time) etime {
	if t.IsZero() {
		return 0
	}
	switch {
	case t.Before(minTime):
		return etime(minTime.UnixNano())
	case t.After(maxTime):
		return etime(maxTime.UnixNano())
	}
	n := t.UnixNano()
	if n == 0 {
		return 1 // the epoch itself, told apart from none
	}
	return etime(n)
}

var (
	minTime = time.Unix(0, -1<<63+1).UTC()
	maxTime = time.Unix(0, 1<<63-1).UTC()
)

// Time returns t as a time.Time in UTC; 0 is the zero time.
func (t etime) Time() time.Time {
	if t == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(t)).UTC()
}

func (t etime) IsZero() bool              { return t == 0 }
func (t etime) Before(u etime) bool       { return t < u }
func (t etime) After(u etime) bool        { return t > u }
func (t etime) Equal(u etime) bool        { return t == u }
func (t etime) Add(d time.Duration) etime { return t + etime(d) }
func (t etime) Sub(u etime) time.Duration { return time.Duration(t - u) }
