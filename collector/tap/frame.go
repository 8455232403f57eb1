package tap

import "bytes"

// DefaultMaxMessageBytes bounds one message a framer gathers: a longer one
// still passes through the relay but is not recorded.
const DefaultMaxMessageBytes = 16 << 20

// PrefixBytes is how much of a message too large to record a framer keeps,
// to read its id from (ResponseID).
const PrefixBytes = 4 << 10

// keepPrefix appends to prefix what of b still fits in PrefixBytes.
func keepPrefix(prefix, b []byte) []byte {
	if room := PrefixBytes - len(prefix); room > 0 {
		prefix = append(prefix, b[:min(room, len(b))]...)
	}
	return prefix
}

// SSE gathers the data of Server-Sent Events from a stream fed in pieces
// of any size. The zero value is ready, with DefaultMaxMessageBytes.
type SSE struct {
	// Max bounds one event's data; 0 means DefaultMaxMessageBytes.
	Max int
	// Oversized counts events dropped for their size.
	Oversized int
	// Big, when set, is called with the first PrefixBytes of the data of
	// each event dropped for its size (as far as they are known), when the
	// event ends. The slice is only valid during the call.
	Big func(prefix []byte)

	prefix  []byte // the start of the data of an event too big
	bigData bool   // the line found too big is a data line: its rest is data
	line    []byte // the line being gathered
	data    []byte // the event's data so far
	hasData bool
	tooBig  bool // the current line or event passed Max
	lastCR  bool // the previous piece ended in \r: a following \n belongs to it
}

// Feed takes the next bytes of the stream and calls event with the data of
// every event they complete. The slice is only valid during the call.
func (s *SSE) Feed(p []byte, event func(data []byte)) {
	max := s.Max
	if max <= 0 {
		max = DefaultMaxMessageBytes
	}
	for len(p) > 0 {
		if s.lastCR && p[0] == '\n' {
			p = p[1:]
			s.lastCR = false
			continue
		}
		s.lastCR = false
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			s.appendLine(p, max)
			return
		}
		s.appendLine(p[:i], max)
		if p[i] == '\r' {
			if i+1 < len(p) && p[i+1] == '\n' {
				i++
			} else if i+1 == len(p) {
				s.lastCR = true
			}
		}
		p = p[i+1:]
		s.endLine(event, max)
	}
}

func (s *SSE) appendLine(b []byte, max int) {
	if s.tooBig {
		if s.bigData {
			s.prefix = keepPrefix(s.prefix, b)
		}
		return
	}
	if len(s.line)+len(b) > max+len("data: ") {
		s.tooBig = true
		s.startPrefix(append(s.line, b...))
		s.line = s.line[:0]
		return
	}
	s.line = append(s.line, b...)
}

// startPrefix keeps the start of the data of an event found too big while
// its line line was gathered (line holds what of it came so far): the
// data before it, and the line's value when it is a data line.
func (s *SSE) startPrefix(line []byte) {
	if s.Big == nil {
		return
	}
	s.prefix = keepPrefix(s.prefix[:0], s.data)
	if s.hasData {
		s.prefix = keepPrefix(s.prefix, []byte("\n"))
	}
	value, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	value, _ = bytes.CutPrefix(value, []byte(" "))
	s.prefix = keepPrefix(s.prefix, value)
	s.bigData = true
}

func (s *SSE) endLine(event func([]byte), max int) {
	line := s.line
	s.line = s.line[:0]
	if len(line) == 0 && !s.tooBig {
		if s.hasData {
			event(s.data)
		}
		s.data, s.hasData = s.data[:0], false
		return
	}
	if len(line) == 0 {
		// The end of an event whose data was too big.
		s.Oversized++
		s.tooBig = false
		if s.Big != nil {
			s.Big(s.prefix)
		}
		s.prefix, s.bigData = s.prefix[:0], false
		s.data, s.hasData = s.data[:0], false
		return
	}
	if s.tooBig {
		return
	}
	name, value := line, []byte(nil)
	if c := bytes.IndexByte(line, ':'); c >= 0 {
		name, value = line[:c], line[c+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	if string(name) != "data" {
		return // comments, event, id and retry fields
	}
	if s.hasData {
		s.data = append(s.data, '\n')
	}
	if len(s.data)+len(value) > max {
		s.tooBig = true
		s.startPrefix(line)
		s.bigData = false // the line is whole: what follows is other lines
		return
	}
	s.data = append(s.data, value...)
	s.hasData = true
}

// Lines gathers newline-delimited messages (the MCP stdio transport) from
// a stream fed in pieces of any size. The zero value is ready, with
// DefaultMaxMessageBytes.
type Lines struct {
	// Max bounds one line; 0 means DefaultMaxMessageBytes.
	Max int
	// Oversized counts lines dropped for their size.
	Oversized int
	// Big, when set, is called with the first PrefixBytes of each line
	// dropped for its size, when the line ends. The slice is only valid
	// during the call.
	Big func(prefix []byte)

	buf    []byte
	prefix []byte // the start of a line too big
	tooBig bool
}

// Feed takes the next bytes of the stream and calls line with every
// complete, non-blank line, without its end of line. The slice is only
// valid during the call.
func (l *Lines) Feed(p []byte, line func([]byte)) {
	l.FeedAt(p, func(b []byte, _ int) { line(b) })
}

// FeedAt is Feed, and also tells where in p each line began: start is the
// offset of its first byte, or -1 when it began in an earlier piece. A
// relay that could write only the first n bytes of p knows that the lines
// with start >= n never reached the other side.
func (l *Lines) FeedAt(p []byte, line func(b []byte, start int)) {
	max := l.Max
	if max <= 0 {
		max = DefaultMaxMessageBytes
	}
	off := 0
	for len(p) > 0 {
		start := off
		if len(l.buf) > 0 || l.tooBig {
			start = -1
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.add(p, max)
			return
		}
		l.add(p[:i], max)
		p, off = p[i+1:], off+i+1
		if l.tooBig {
			l.Oversized++
			l.tooBig = false
			if l.Big != nil {
				l.Big(l.prefix)
			}
			l.prefix = l.prefix[:0]
		} else if b := bytes.TrimSpace(l.buf); len(b) > 0 {
			line(b, start)
		}
		l.buf = l.buf[:0]
	}
}

// Rest returns what was fed after the last end of line.
func (l *Lines) Rest() []byte { return bytes.TrimSpace(l.buf) }

func (l *Lines) add(b []byte, max int) {
	if l.tooBig {
		if l.Big != nil {
			l.prefix = keepPrefix(l.prefix, b)
		}
		return
	}
	if len(l.buf)+len(b) > max {
		l.tooBig = true
		if l.Big != nil {
			l.prefix = keepPrefix(keepPrefix(l.prefix[:0], bytes.TrimLeft(l.buf, " \t\r")), b)
		}
		l.buf = l.buf[:0]
		return
	}
	l.buf = append(l.buf, b...)
}
