package capgen

import (
	"math/rand"
	"strconv"
	"time"
)

// Kind tells a call of a session from the noise beside it.
type Kind uint8

const (
	// KindCall is an exchange of a session.
	KindCall Kind = iota
	// KindRepeat is a second observer's record of the exchange just
	// before it, 200 ms later: the same call, which must be stored or
	// judged once.
	KindRepeat
	// KindBad is a record (or span) that must be rejected.
	KindBad
)

// Call is one generated exchange as an observer recorded it.
type Call struct {
	// Time is when the request was sent.
	Time     time.Time
	Server   string
	Session  string
	Tenant   string
	Tool     string
	RPCID    int
	Duration time.Duration
	// Arguments is the tools/call arguments object, as JSON.
	Arguments string
	// Result is the tools/call result object as JSON; empty when the
	// exchange got no answer.
	Result string
	// TransportError is set when the exchange failed without an answer
	// ("timeout").
	TransportError string
	Kind           Kind
	// bad is the index of the bad line of a KindBad call.
	bad uint8
	// seq orders calls of equal time as they were generated.
	seq uint64
}

// Stream generates a capture while it is read: sessions start in event
// time order, and each call is returned once no session that starts later
// can come before it. It holds only the calls of the sessions still open
// (Held), never the whole capture; the calls of one session come out in
// its order. A Stream is not safe for concurrent use.
type Stream struct {
	cfg Config
	rng *rand.Rand
	// OnExpected, when set, is told each finding the capture must produce,
	// as its session is generated.
	OnExpected func(Expected)

	next      int       // index of the next session to start
	nextStart time.Time // its start
	open      callHeap  // generated calls not returned yet
	noise     [2]*Call  // noise to return after the call just returned
	noiseAt   int
	noiseLen  int
	last      time.Time
	tailDone  bool
	seq       uint64

	calls, bad int
	maxHeld    int
	scenarios  map[string]int
	// buf is the sessions' scratch buffer.
	buf []byte
	// skipUntil, while Skip runs, drops the calls dated before it.
	skipUntil time.Time
	skipped   int
	// endAt, when set, is when sessions stop starting (EndAt).
	endAt time.Time
}

// NewStream returns a stream of the capture cfg describes.
func NewStream(cfg Config) *Stream {
	if cfg.Start.IsZero() {
		cfg.Start = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	}
	if cfg.Span == 0 {
		cfg.Span = time.Hour
	}
	if cfg.AnomalyRate == 0 {
		cfg.AnomalyRate = 0.2
	}
	if cfg.NoiseRate == 0 {
		cfg.NoiseRate = 0.01
	}
	s := &Stream{cfg: cfg, rng: rand.New(rand.NewSource(cfg.Seed)), scenarios: map[string]int{}}
	s.drawStart()
	return s
}

// drawStart draws the start of the next session: sessions start spread
// evenly over the span, each at a random point of its share of it, so that
// they come in order.
func (s *Stream) drawStart() {
	if s.next >= s.cfg.Sessions {
		return
	}
	at := (float64(s.next) + s.rng.Float64()) / float64(s.cfg.Sessions)
	s.nextStart = s.cfg.Start.Add(time.Duration(at * float64(s.cfg.Span)))
}

// Next returns the next call in event time order (a duplicate observation
// comes right after its original, 200 ms later), and false at the end.
func (s *Stream) Next() (*Call, bool) {
	if s.noiseAt < s.noiseLen {
		c := s.noise[s.noiseAt]
		s.noiseAt++
		return c, true
	}
	s.fill()
	if len(s.open) == 0 {
		if s.tailDone || s.cfg.NoTail {
			return nil, false
		}
		// A harmless tail call long after the last session closes every
		// window.
		s.tailDone = true
		tail := s.newSession("thegram", "s-tail", s.last.Add(20*time.Minute))
		tail.call("gram_projects", rawEmpty, projectsOK)
	}
	c := s.open.pop()
	if c.Time.After(s.last) {
		s.last = c.Time
	}
	s.calls++
	s.noiseAt, s.noiseLen = 0, 0
	if s.rng.Float64() < s.cfg.NoiseRate/2 {
		// A second observer of the same exchange, 200 ms off.
		dup := *c
		dup.Time = c.Time.Add(200 * time.Millisecond)
		dup.Kind = KindRepeat
		s.noise[s.noiseLen] = &dup
		s.noiseLen++
	}
	if s.rng.Float64() < s.cfg.NoiseRate/2 {
		s.noise[s.noiseLen] = &Call{Time: c.Time, Server: c.Server, Kind: KindBad, bad: uint8(s.rng.Intn(len(badLines))), seq: c.seq}
		s.noiseLen++
		s.bad++
	}
	return c, true
}

// fill starts the sessions that begin before the earliest call held.
func (s *Stream) fill() {
	for s.more() && (len(s.open) == 0 || !s.nextStart.After(s.open[0].c.Time)) {
		s.startSession()
	}
}

// more tells whether a session is left to start.
func (s *Stream) more() bool {
	return s.next < s.cfg.Sessions && (s.endAt.IsZero() || !s.nextStart.After(s.endAt))
}

// EndAt ends the capture at t: no session starts after t, and the
// sessions begun by then are finished (their calls after t are still
// returned), so that no session is cut. A live load ends so: a session cut
// after its write would leave the write unverified, a finding the
// generator did not intend (op21's D3).
func (s *Stream) EndAt(t time.Time) { s.endAt = t }

// Skip leaves out the calls dated before until and returns how many: the
// sessions under way at until go on, as when a recording starts on live
// traffic. Skipped calls are not counted; the sessions that end before
// until are generated but none of their calls is held.
func (s *Stream) Skip(until time.Time) int {
	s.skipUntil, s.skipped = until, 0
	for s.more() && s.nextStart.Before(until) {
		s.startSession()
	}
	s.skipUntil = time.Time{}
	for len(s.open) > 0 && s.open[0].c.Time.Before(until) {
		s.open.pop()
		s.skipped++
	}
	return s.skipped
}

// startSession generates the next session and queues its calls.
func (s *Stream) startSession() {
	var sc scenario
	if s.rng.Float64() < s.cfg.AnomalyRate {
		sc = anomalies[s.rng.Intn(len(anomalies))]
	} else {
		sc = normals[s.rng.Intn(len(normals))]
	}
	id := string(strconv.AppendInt([]byte("s-"), s.rng.Int63(), 16))
	sess := s.newSession(sc.server, id, s.nextStart)
	sc.run(sess)
	s.scenarios[sc.name]++
	s.next++
	s.drawStart()
	if len(s.open) > s.maxHeld {
		s.maxHeld = len(s.open)
	}
}

// Calls returns how many distinct calls were returned so far (duplicate
// observations and bad lines not counted).
func (s *Stream) Calls() int { return s.calls }

// BadLines returns how many calls returned so far must be rejected.
func (s *Stream) BadLines() int { return s.bad }

// Held returns how many generated calls wait to be returned: the calls
// of the sessions still open.
func (s *Stream) Held() int { return len(s.open) }

// MaxHeld returns the most calls held at once so far.
func (s *Stream) MaxHeld() int { return s.maxHeld }

// Scenarios returns how many sessions of each scenario were generated.
func (s *Stream) Scenarios() map[string]int {
	out := make(map[string]int, len(s.scenarios))
	for k, v := range s.scenarios {
		out[k] = v
	}
	return out
}

// callHeap is a min-heap of calls by time, then generation order.
type callHeap []heapEntry

type heapEntry struct {
	at  int64
	seq uint64
	c   *Call
}

func (h callHeap) less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}

func (h *callHeap) push(c *Call) {
	*h = append(*h, heapEntry{c.Time.UnixNano(), c.seq, c})
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *callHeap) pop() *Call {
	q := *h
	c := q[0].c
	n := len(q) - 1
	q[0] = q[n]
	q[n] = heapEntry{}
	q = q[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return c
}
