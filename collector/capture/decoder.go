package capture

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/otlp"
)

// Format is the shape of an input, detected from its content.
type Format int

// Input formats.
const (
	FormatUnknown Format = iota
	// FormatRecords is NDJSON call records, one per line.
	FormatRecords
	// FormatRecordArray is a JSON array of call records.
	FormatRecordArray
	// FormatOTLP is OTLP JSON: one document, or one document per line as the
	// Collector's file exporter writes.
	FormatOTLP
)

func (f Format) String() string {
	switch f {
	case FormatRecords:
		return "call records (NDJSON)"
	case FormatRecordArray:
		return "call records (JSON array)"
	case FormatOTLP:
		return "OTLP JSON"
	}
	return "unknown"
}

// MaxLine is the longest NDJSON line accepted; a longer one is rejected and
// skipped. Default 16 MiB.
const MaxLine = 16 << 20

// SpanError says why one OTLP span was rejected.
type SpanError struct {
	Source string
	Line   int // line of the OTLP document in a JSON-lines file; 0 otherwise
	otlp.RejectedSpan
}

func (e *SpanError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.Source, e.Line, e.RejectedSpan.Error())
	}
	return e.Source + ": " + e.RejectedSpan.Error()
}

// IsReject reports whether err rejects one record or span only, so that
// reading may go on.
func IsReject(err error) bool {
	var re *RecordError
	var se *SpanError
	return errors.As(err, &re) || errors.As(err, &se)
}

// Decoder streams calls out of one input. Memory is bounded by one record
// (or one OTLP document), not by the input.
type Decoder struct {
	name   string
	r      *bufio.Reader
	format Format
	line   int
	rp     RecordParser
	jd     *json.Decoder
	queue  []*audit.Call
	errs   []error
	done   bool
	// Ignored counts records and spans of methods other than tools/call.
	Ignored int
}

// NewDecoder detects the format of r (gzip is unwrapped first) and returns a
// decoder for it. name is used in error messages.
func NewDecoder(r io.Reader, name string) (*Decoder, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("cannot read gzip input %s: %w", name, err)
		}
		br = bufio.NewReaderSize(zr, 1<<16)
	}
	d := &Decoder{name: name, r: br}
	f, err := detect(br)
	if err != nil {
		return nil, fmt.Errorf("cannot detect the format of %s: %w", name, err)
	}
	d.format = f
	if f == FormatRecordArray {
		d.jd = json.NewDecoder(br)
		if _, err := d.jd.Token(); err != nil {
			return nil, fmt.Errorf("cannot read JSON array %s: %w", name, err)
		}
	}
	return d, nil
}

// Format returns the detected format.
func (d *Decoder) Format() Format { return d.format }

// detect peeks at the start of the input. An empty input is read as NDJSON
// with no records.
func detect(br *bufio.Reader) (Format, error) {
	for n := 64; ; n *= 2 {
		b, err := br.Peek(n)
		b = bytes.TrimLeft(b, " \t\r\n\ufeff")
		b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
		if len(b) > 0 {
			switch b[0] {
			case '[':
				return FormatRecordArray, nil
			case '{':
				return detectObject(br), nil
			default:
				// Not JSON at all: let the NDJSON path reject it line by line.
				return FormatRecords, nil
			}
		}
		if err != nil {
			if err == io.EOF || errors.Is(err, bufio.ErrBufferFull) {
				return FormatRecords, nil
			}
			return FormatUnknown, err
		}
	}
}

// detectObject tells OTLP from call records: OTLP documents have a
// resourceSpans key at the top; call records have time/server/request.
func detectObject(br *bufio.Reader) Format {
	b, _ := br.Peek(br.Size())
	i := bytes.IndexByte(b, '{')
	depth := 0
	inStr, esc := false, false
	for j := i; j < len(b); j++ {
		c := b[j]
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			if !inStr && depth == 1 {
				rest := b[j:]
				if bytes.HasPrefix(rest, []byte(`"resourceSpans"`)) || bytes.HasPrefix(rest, []byte(`"resource_spans"`)) {
					return FormatOTLP
				}
			}
			inStr = !inStr
		case inStr:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return FormatRecords
			}
		}
	}
	return FormatRecords
}

// Next returns the next call. At the end it returns io.EOF. A rejected
// record or span is returned as an error for which IsReject is true; the
// caller reports it and calls Next again. Any other error ends the input.
func (d *Decoder) Next() (*audit.Call, error) {
	for {
		if len(d.errs) > 0 {
			err := d.errs[0]
			d.errs = d.errs[1:]
			return nil, err
		}
		if len(d.queue) > 0 {
			c := d.queue[0]
			d.queue[0] = nil
			if len(d.queue) == 1 {
				// Keep the array: NDJSON queues one call at a time, and
				// slicing past it would allocate a new one for each.
				d.queue = d.queue[:0]
			} else {
				d.queue = d.queue[1:]
			}
			return c, nil
		}
		if d.done {
			return nil, io.EOF
		}
		var err error
		switch d.format {
		case FormatRecordArray:
			err = d.nextArray()
		case FormatOTLP:
			err = d.nextOTLP()
		default:
			err = d.nextRecord()
		}
		if err != nil {
			return nil, err
		}
	}
}

// readLine returns the next line without its newline. Lines longer than
// MaxLine are consumed and reported as too long.
func (d *Decoder) readLine() ([]byte, bool, error) {
	var long []byte
	tooLong := false
	for {
		chunk, err := d.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if !tooLong {
				long = append(long, chunk...)
				if len(long) > MaxLine {
					tooLong, long = true, nil
				}
			}
			continue
		}
		if long != nil {
			chunk = append(long, chunk...)
		}
		if len(chunk) > MaxLine {
			tooLong, chunk = true, nil
		}
		if err == io.EOF && len(chunk) == 0 && !tooLong {
			return nil, false, io.EOF
		}
		if err != nil && err != io.EOF {
			return nil, false, err
		}
		d.line++
		if err == io.EOF {
			d.done = true
		}
		return bytes.TrimRight(chunk, "\r\n"), tooLong, nil
	}
}

func (d *Decoder) nextRecord() error {
	line, tooLong, err := d.readLine()
	if err == io.EOF {
		d.done = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", d.name, err)
	}
	if tooLong {
		d.errs = append(d.errs, &RecordError{Source: d.name, Line: d.line, Reason: fmt.Sprintf("line longer than %d bytes", MaxLine)})
		return nil
	}
	if d.line == 1 {
		line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return nil
	}
	d.parse(line)
	return nil
}

// parse queues the call of one record, or its reject.
func (d *Decoder) parse(data []byte) {
	c, err := d.rp.Parse(data, d.name, d.line)
	if err != nil {
		d.errs = append(d.errs, err)
		return
	}
	if c.Method != "tools/call" {
		// Other MCP methods (initialize, tools/list...) are counted and
		// otherwise ignored, as spans of other methods are.
		d.Ignored++
		return
	}
	d.queue = append(d.queue, c)
}

func (d *Decoder) nextArray() error {
	if !d.jd.More() {
		d.done = true
		return nil
	}
	d.line++
	var raw json.RawMessage
	if err := d.jd.Decode(&raw); err != nil {
		// The array itself is broken: nothing after this point can be
		// located, so the input ends here with what was read.
		d.done = true
		d.errs = append(d.errs, &RecordError{Source: d.name, Line: d.line, Reason: fmt.Sprintf("broken JSON array after element %d: %v", d.line-1, err)})
		return nil
	}
	d.parse(raw)
	return nil
}

// nextOTLP reads one OTLP document: a whole line when the file is JSON
// lines, otherwise the rest of the input.
func (d *Decoder) nextOTLP() error {
	var doc []byte
	line := 0
	first, tooLong, err := d.readLine()
	if err == io.EOF {
		d.done = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", d.name, err)
	}
	if tooLong {
		d.errs = append(d.errs, &RecordError{Source: d.name, Line: d.line, Reason: fmt.Sprintf("line longer than %d bytes", MaxLine)})
		return nil
	}
	if len(bytes.TrimSpace(first)) == 0 {
		return nil
	}
	if json.Valid(first) {
		doc, line = first, d.line
	} else {
		rest, err := io.ReadAll(d.r)
		if err != nil {
			return fmt.Errorf("cannot read %s: %w", d.name, err)
		}
		doc = append(append(append([]byte{}, first...), '\n'), rest...)
		d.done = true
	}
	td, err := otlp.DecodeJSON(doc)
	if err != nil {
		d.errs = append(d.errs, &RecordError{Source: d.name, Line: line, Reason: err.Error()})
		return nil
	}
	res := otlp.Convert(td, d.name+":")
	d.Ignored += res.Ignored
	for _, r := range res.Rejected {
		d.errs = append(d.errs, &SpanError{Source: d.name, Line: line, RejectedSpan: r})
	}
	// Exporters group spans by resource (one block per service or pod), so
	// a document is not in time order across blocks; it is in memory
	// already, so put its calls in time order here.
	slices.SortStableFunc(res.Calls, func(a, b *audit.Call) int { return a.Time.Compare(b.Time) })
	d.queue = append(d.queue, res.Calls...)
	return nil
}
