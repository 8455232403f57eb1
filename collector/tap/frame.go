package tap

import "bytes"

// DefaultMaxMessageBytes bounds one message a framer gathers: a longer one
// still passes through the relay but is not recorded.
const DefaultMaxMessageBytes = 16 << 20

// SSE gathers the data of Server-Sent Events from a stream fed in pieces
// of any size. The zero value is ready, with DefaultMaxMessageBytes.
type SSE struct {
	// Max bounds one event's data; 0 means DefaultMaxMessageBytes.
	Max int
	// Oversized counts events dropped for their size.
	Oversized int

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
		return
	}
	if len(s.line)+len(b) > max+len("data: ") {
		s.tooBig = true
		s.line = s.line[:0]
		return
	}
	s.line = append(s.line, b...)
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

	buf    []byte
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
		return
	}
	if len(l.buf)+len(b) > max {
		l.tooBig = true
		l.buf = l.buf[:0]
		return
	}
	l.buf = append(l.buf, b...)
}
