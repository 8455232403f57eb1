package capture

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// cursor walks JSON text read from a stream through a window of it. It
// checks structure only (brackets, commas, colons, quotes): the values the
// decoder uses are parsed by fastjson, which checks them. A value can be
// kept whole (mark, kept): the window then grows to hold it, up to
// maxValue bytes.
type cursor struct {
	r   io.Reader
	buf []byte
	// buf[i:n] is read and not yet walked.
	i, n int
	// off is the stream offset of buf[0].
	off int64
	// mark is the index of the start of the value being kept, -1 when none.
	mark int
	// rerr is the reader's error once it returned one (io.EOF at the end).
	rerr error
	// lines counts the newlines before buf[counted].
	lines   int
	counted int
	// maxValue bounds a kept value; overflow is set when the value being
	// kept outgrew it, and is then no longer kept.
	maxValue int
	overflow bool
	// lineMode makes a line end inside a value a syntax error: in a file of
	// one document per line, a document that does not end on its line is
	// broken there, and the next line is the next document.
	lineMode bool
}

// errTruncated is returned when the input ends inside a value.
var errTruncated = errors.New("unexpected end of input")

func newCursor(r io.Reader, size, maxValue int) *cursor {
	return &cursor{r: r, buf: make([]byte, size), mark: -1, maxValue: maxValue}
}

// syntaxError says where the text is not what the walk expects.
type syntaxError struct {
	Offset int64 // stream offset of the offending byte
	Line   int
	Reason string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("line %d, byte %d: %s", e.Line, e.Offset, e.Reason)
}

// fail returns a syntax error at the cursor.
func (c *cursor) fail(format string, a ...any) error {
	if c.i >= c.n && c.rerr != nil && c.rerr != io.EOF {
		return c.rerr
	}
	return &syntaxError{Offset: c.pos(), Line: c.line(), Reason: fmt.Sprintf(format, a...)}
}

// pos returns the stream offset of the cursor.
func (c *cursor) pos() int64 { return c.off + int64(c.i) }

// line returns the 1-based line of the cursor.
func (c *cursor) line() int {
	if c.i > c.counted {
		c.lines += bytes.Count(c.buf[c.counted:c.i], []byte{'\n'})
		c.counted = c.i
	}
	return c.lines + 1
}

// fill reads more of the stream into the window; false at the end of the
// stream or on a read error (kept in rerr).
func (c *cursor) fill() bool {
	if c.rerr != nil {
		return false
	}
	if c.mark >= 0 && c.i-c.mark > c.maxValue {
		c.mark, c.overflow = -1, true
	}
	keep := c.i
	if c.mark >= 0 && c.mark < keep {
		keep = c.mark
	}
	if keep > 0 {
		c.line() // count the lines about to leave the window
		copy(c.buf, c.buf[keep:c.n])
		c.n -= keep
		c.i -= keep
		c.counted -= keep
		c.off += int64(keep)
		if c.mark >= 0 {
			c.mark -= keep
		}
	}
	if c.n == len(c.buf) {
		// Only a kept value fills the window: make room for it.
		grown := make([]byte, 2*len(c.buf))
		copy(grown, c.buf[:c.n])
		c.buf = grown
	}
	for {
		m, err := c.r.Read(c.buf[c.n:])
		c.n += m
		if err != nil {
			c.rerr = err
		}
		if m > 0 || err != nil {
			return m > 0
		}
	}
}

// peek returns the next byte that is not white space, without taking it;
// false at the end of the input.
func (c *cursor) peek() (byte, bool) {
	for {
		for c.i < c.n {
			switch b := c.buf[c.i]; b {
			case '\n':
				if c.lineMode {
					return b, true
				}
				c.i++
			case ' ', '\t', '\r':
				c.i++
			default:
				return b, true
			}
		}
		if !c.fill() {
			return 0, false
		}
	}
}

// expect takes the byte b after white space.
func (c *cursor) expect(b byte, what string) error {
	got, ok := c.peek()
	if !ok {
		return c.fail("%s: %v", what, errTruncated)
	}
	if got != b {
		return c.unexpected(got, "%s: want %q", what, b)
	}
	c.i++
	return nil
}

// more is for the members of an object or the items of an array whose
// opening bracket was taken: it takes the comma before the next one and
// reports whether there is one; at the closing bracket it takes it and
// returns false. first is true before the first member.
func (c *cursor) more(close byte, first bool) (bool, error) {
	b, ok := c.peek()
	if !ok {
		return false, c.fail("%v", errTruncated)
	}
	if b == close {
		c.i++
		return false, nil
	}
	if !first {
		if b != ',' {
			return false, c.unexpected(b, "want ',' or %q", close)
		}
		c.i++
	}
	return true, nil
}

// unexpected fails at the byte b at the cursor, which is not what the walk
// wants.
func (c *cursor) unexpected(b byte, format string, a ...any) error {
	if b == '\n' && c.lineMode {
		return c.fail("the document does not end on its line")
	}
	return c.fail(format+", found %q", append(a, b)...)
}

// key reads an object member's key and its colon. The key is its raw text
// between the quotes (escapes as written), valid until the window moves.
func (c *cursor) key() ([]byte, error) {
	b, ok := c.peek()
	if !ok {
		return nil, c.fail("%v", errTruncated)
	}
	if b != '"' {
		return nil, c.unexpected(b, "want an object key")
	}
	c.mark = c.i
	err := c.skipString()
	start := c.mark
	c.mark = -1
	if err != nil {
		return nil, err
	}
	k := c.buf[start+1 : c.i-1]
	if err := c.expect(':', "object"); err != nil {
		return nil, err
	}
	return k, nil
}

// skipString takes the string whose opening quote is at the cursor. A
// quote ends it unless an odd run of backslashes is before it: one search
// per quote, escaped quotes included (OTLP attributes hold JSON, quotes
// escaped), where a search per escape cost twice as much.
func (c *cursor) skipString() error {
	c.i++
	// odd is set when the text walked so far ends with an odd run of
	// backslashes (the window may have moved since).
	odd := false
	for {
		if c.i >= c.n && !c.fill() {
			return c.fail("string: %v", errTruncated)
		}
		rest := c.buf[c.i:c.n]
		q := bytes.IndexByte(rest, '"')
		seg := rest
		if q >= 0 {
			seg = rest[:q]
		}
		// JSON strings hold no line ends: one means the string was cut off
		// (and the next line may start a document).
		if nl := bytes.IndexByte(seg, '\n'); nl >= 0 {
			c.i += nl
			if c.lineMode {
				return c.fail("the document does not end on its line")
			}
			return c.fail("string: line end before its closing quote")
		}
		odd = oddBackslashes(seg, odd)
		if q < 0 {
			c.i = c.n
			continue
		}
		c.i += q + 1
		if !odd {
			return nil
		}
		odd = false // that quote was escaped
	}
}

// oddBackslashes reports whether seg ends with an odd run of backslashes;
// a seg of backslashes only continues the run before it, of parity odd.
func oddBackslashes(seg []byte, odd bool) bool {
	n := 0
	for n < len(seg) && seg[len(seg)-1-n] == '\\' {
		n++
	}
	if n == len(seg) {
		return odd != (n%2 == 1)
	}
	return n%2 == 1
}

// skip takes the value at the cursor.
func (c *cursor) skip() error {
	b, ok := c.peek()
	if !ok {
		return c.fail("value: %v", errTruncated)
	}
	switch b {
	case '"':
		return c.skipString()
	case '{', '[':
		return c.skipNested()
	case ',', ':', '}', ']', '\n':
		return c.unexpected(b, "want a value")
	}
	// A number or a literal ends at a delimiter.
	for {
		for c.i < c.n {
			if delimiter[c.buf[c.i]] {
				return nil
			}
			c.i++
		}
		if !c.fill() {
			return nil
		}
	}
}

// maxSkipDepth bounds the nesting skipNested follows. Past fastjson's
// 300 levels, which the parser of each span enforces, and past an OTLP
// envelope around them: a span nested too deep is rejected alone by that
// parser, with its path, and the spans beside it are read. (At 64, the
// bound before, a span with an attribute value 16 OTLP levels deep, which
// serve takes up to serve.receiver.max_depth, 32, lost its whole document.)
const maxSkipDepth = 10_000

// skipNested takes the object or array at the cursor. It checks that
// brackets balance and strings end; the rest of its structure is left to
// whoever parses it.
func (c *cursor) skipNested() error {
	// Most values nest a few levels: the stack starts in a local array
	// and goes to the heap only past it.
	var small [64]byte
	stack := small[:0]
	stops := &structural
	if c.lineMode {
		stops = &structuralLine
	}
	for {
		for c.i < c.n {
			b := c.buf[c.i]
			if !stops[b] {
				c.i++
				continue
			}
			switch b {
			case '\n':
				return c.fail("the document does not end on its line")
			case '"':
				if err := c.skipString(); err != nil {
					return err
				}
				continue
			case '{', '[':
				if len(stack) == maxSkipDepth {
					return c.fail("nested deeper than %d", maxSkipDepth)
				}
				stack = append(stack, b)
			default: // '}', ']'
				if len(stack) == 0 || b != stack[len(stack)-1]+2 { // '[' + 2 == ']', '{' + 2 == '}'
					return c.fail("unbalanced %q", b)
				}
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					c.i++
					return nil
				}
			}
			c.i++
		}
		if !c.fill() {
			return c.fail("%v", errTruncated)
		}
	}
}

// keep takes the value at the cursor and returns its text, valid until the
// window moves; tooLong is set when it is longer than maxValue (the text is
// then nil).
func (c *cursor) keep() (text []byte, tooLong bool, err error) {
	if _, ok := c.peek(); !ok {
		return nil, false, c.fail("value: %v", errTruncated)
	}
	c.mark, c.overflow = c.i, false
	err = c.skip()
	start := c.mark
	c.mark = -1
	if err != nil {
		return nil, false, err
	}
	if c.overflow || c.i-start > c.maxValue {
		return nil, true, nil
	}
	return c.buf[start:c.i], false, nil
}

// literal reads a number or a string value at the cursor as text (a
// string without its quotes, escapes as written); ok is false for other
// values, which are skipped.
func (c *cursor) literal() (text []byte, ok bool, err error) {
	b, there := c.peek()
	if !there {
		return nil, false, c.fail("value: %v", errTruncated)
	}
	if b == '{' || b == '[' {
		return nil, false, c.skip()
	}
	c.mark = c.i
	err = c.skip()
	start := c.mark
	c.mark = -1
	if err != nil {
		return nil, false, err
	}
	t := c.buf[start:c.i]
	if len(t) >= 2 && t[0] == '"' {
		t = t[1 : len(t)-1]
	}
	return t, true, nil
}

// structuralLine is structural with the line end, for lineMode.
var structuralLine = byteSet("\"{}[]\n")

// skipLine moves the cursor past the next line end; false at the end of
// the input.
func (c *cursor) skipLine() bool {
	for {
		if nl := bytes.IndexByte(c.buf[c.i:c.n], '\n'); nl >= 0 {
			c.i += nl + 1
			return true
		}
		c.i = c.n
		if !c.fill() {
			return false
		}
	}
}

// startsDocument reports whether the line at the cursor starts an OTLP
// JSON document: `{"resourceSpans"` or `{"resource_spans"` at its start.
func (c *cursor) startsDocument() bool {
	const longest = len(`{"resource_spans"`)
	for c.n-c.i < longest && c.fill() {
	}
	rest := c.buf[c.i:c.n]
	return bytes.HasPrefix(rest, []byte(`{"resourceSpans"`)) || bytes.HasPrefix(rest, []byte(`{"resource_spans"`))
}
