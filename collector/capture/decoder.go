package capture

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
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
func IsReject(err error) bool { return RejectKind(err) != "" }

// RejectKind is the reason a rejected record or span is counted under in
// mcpaudit_ingest_rejected_total (one of exporter/metrics' RejectReasons):
// the Kind set where it was rejected, invalid_json for a record and
// bad_span for a span without one; empty when err rejects neither. serve
// and analyze both count by it, so that one input counts the same in both;
// never by the error's words.
func RejectKind(err error) string {
	var se *SpanError
	if errors.As(err, &se) {
		return se.CountedAs()
	}
	var re *RecordError
	if errors.As(err, &re) {
		if re.Kind == "" {
			return kindInvalidJSON
		}
		return re.Kind
	}
	return ""
}

// Decoder streams calls out of one input. Memory is bounded by one record,
// or for OTLP JSON by the blocks of one document being merged (see
// otlpReader), not by the input.
type Decoder struct {
	name   string
	r      *bufio.Reader
	format Format
	line   int
	rp     RecordParser
	jd     *json.Decoder
	otlp   *otlpReader
	errs   []error
	done   bool
	// keep is false once DropPayloads was called.
	keep bool
	// known is what the decoder knew of the last call beside its JSON.
	known dialect.Known
	// gz counts the compressed bytes read, nil when the input is not gzip.
	gz *countReader
	// Ignored counts records and spans of methods other than tools/call.
	Ignored int
	// warn keeps the warnings of the records taken.
	warn warnings
}

// Warnings returns what the records taken so far held that was read
// leniently (docs/api.md, "Members read leniently"): the first warning of
// each kind for each field, up to MaxWarningsShown, in input order.
func (d *Decoder) Warnings() []Warning { return d.warn.shown }

// WarnCounts returns how many warnings the records taken so far gave, by
// Kind (one of Warnings), every one counted. The caller must not change
// the map.
func (d *Decoder) WarnCounts() map[string]int { return d.warn.counts }

// NewDecoder detects the format of r (gzip is unwrapped first) and returns a
// decoder for it. name is used in error messages. An OTLP JSON input that
// can be read at offsets (a file: r is an io.ReaderAt and io.Seeker) is read
// where it is; another is spooled, one document at a time.
func NewDecoder(r io.Reader, name string) (*Decoder, error) {
	// An input read at offsets is read from where it stands now.
	var at io.ReaderAt
	var base int64
	if ra, ok := r.(interface {
		io.ReaderAt
		io.Seeker
	}); ok {
		if off, err := ra.Seek(0, io.SeekCurrent); err == nil {
			at, base = ra, off
		}
	}
	br := bufio.NewReaderSize(r, 1<<16)
	var gz *countReader
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz = &countReader{r: br}
		zr, err := gzip.NewReader(gz)
		if err != nil {
			return nil, fmt.Errorf("cannot read gzip input %s: %w", name, err)
		}
		br = bufio.NewReaderSize(zr, 1<<16)
		at = nil
	}
	d := &Decoder{name: name, r: br, keep: true, gz: gz}
	f, err := detect(br)
	if err != nil {
		return nil, fmt.Errorf("cannot detect the format of %s: %w", name, err)
	}
	d.format = f
	switch f {
	case FormatRecordArray:
		d.jd = json.NewDecoder(br)
		if _, err := d.jd.Token(); err != nil {
			return nil, fmt.Errorf("cannot read JSON array %s: %w", name, err)
		}
	case FormatOTLP:
		d.otlp = newOTLPReader(name, br, at, base, true, func(err error) { d.errs = append(d.errs, err) }, &d.Ignored)
		d.otlp.fault = d.gzipFault
	}
	return d, nil
}

// DropPayloads makes the calls of NextRecord come without their payloads
// (arguments, result, error data): they are read from the decoder's parse
// and never copied. Call it before the first NextRecord.
func (d *Decoder) DropPayloads() {
	d.keep = false
	if d.otlp != nil {
		d.otlp.conv.Keep = false
	}
}

// Close releases what the decoder holds beside its input (a spool file).
func (d *Decoder) Close() error {
	if d.otlp != nil && d.otlp.spool != nil {
		return d.otlp.spool.Close()
	}
	return nil
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
//
// The call's reading is NextRecord's: a span known to have answered a
// tool error only by its error.type carries no result to read it from.
func (d *Decoder) Next() (*audit.Call, error) {
	r, err := d.next(nil)
	if err != nil {
		return nil, err
	}
	return r.Call, nil
}

// NextRecord returns the next call and its reading by rd, made from the
// decoder's one parse of the call. Errors are Next's.
func (d *Decoder) NextRecord(rd *dialect.Reader) (*audit.Record, error) {
	return d.next(rd)
}

// Known returns what the decoder knew of the call it returned last beside
// its JSON (an OTLP span's error.type without its result): a reader that
// reads the call again, once masked, is told it (dialect.Reader.ReadKnown).
func (d *Decoder) Known() dialect.Known { return d.known }

// next returns the next call, read by rd when rd is not nil.
func (d *Decoder) next(rd *dialect.Reader) (*audit.Record, error) {
	d.known = dialect.Known{}
	for {
		if len(d.errs) > 0 {
			err := d.errs[0]
			d.errs[0] = nil
			d.errs = d.errs[1:]
			return nil, err
		}
		if d.done {
			return nil, io.EOF
		}
		var r *audit.Record
		var err error
		switch d.format {
		case FormatRecordArray:
			r, err = d.nextArray(rd)
		case FormatOTLP:
			r, d.known, err = d.otlp.next(rd)
			if r == nil && err == nil && len(d.errs) == 0 {
				d.done = true
			}
		default:
			r, err = d.nextRecord(rd)
		}
		if err != nil {
			return nil, err
		}
		if r != nil {
			return r, nil
		}
	}
}

// countReader counts the bytes read through it. It is an io.ByteReader,
// so that gzip reads through it without a buffer of its own and the count
// is what the decompressor consumed.
type countReader struct {
	r *bufio.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

// gzipFault returns the reject of the rest of a gzip input whose stream
// breaks off or is damaged (err, from reading it), or nil for another
// error. What was read before it stands: a capture cut off by an
// interrupted copy or a full disk keeps its records up to the cut.
func (d *Decoder) gzipFault(err error) *RecordError {
	var corrupt flate.CorruptInputError
	if d.gz == nil || !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, gzip.ErrChecksum) && !errors.Is(err, gzip.ErrHeader) && !errors.As(err, &corrupt) {
		return nil
	}
	return &RecordError{Source: d.name, Line: d.line + 1, Reason: fmt.Sprintf(
		"the gzip stream is cut off or damaged at compressed byte %d (%v): the input ends here, what follows is lost", d.gz.n, err)}
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

// nextRecord reads one NDJSON line: its call, or nil (a blank line, a
// reject, another method).
func (d *Decoder) nextRecord(rd *dialect.Reader) (*audit.Record, error) {
	line, tooLong, err := d.readLine()
	if err == io.EOF {
		d.done = true
		return nil, nil
	}
	if err != nil {
		if re := d.gzipFault(err); re != nil {
			d.done = true
			d.errs = append(d.errs, re)
			return nil, nil
		}
		return nil, fmt.Errorf("cannot read %s: %w", d.name, err)
	}
	if tooLong {
		d.errs = append(d.errs, &RecordError{Source: d.name, Line: d.line, Reason: fmt.Sprintf("line longer than %d bytes", MaxLine), Kind: kindTooLarge})
		return nil, nil
	}
	if d.line == 1 {
		line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
	}
	// JSON text sequences (RFC 7464, application/json-seq, which /v1/calls
	// takes) put a record separator before each record.
	line = bytes.TrimPrefix(line, []byte{0x1e})
	if len(bytes.TrimSpace(line)) == 0 {
		return nil, nil
	}
	return d.parse(line, rd), nil
}

// parse returns the call of one record, or nil when it is rejected (the
// reject is queued) or of another method.
func (d *Decoder) parse(data []byte, rd *dialect.Reader) *audit.Record {
	c, err := d.rp.parse(data, d.name, d.line, d.keep || rd == nil)
	if err != nil {
		d.errs = append(d.errs, err)
		return nil
	}
	if c.Method != "tools/call" {
		// Other MCP methods (initialize, tools/list...) are counted and
		// otherwise ignored, as spans of other methods are.
		d.Ignored++
		return nil
	}
	for _, w := range d.rp.warns {
		d.warn.add(w)
	}
	if rd == nil {
		d.rp.payload = dialect.Payload{}
		cc := *c
		return &audit.Record{Call: &cc}
	}
	r := rd.ReadCopy(c, &d.rp.payload)
	d.rp.payload = dialect.Payload{}
	return r
}

func (d *Decoder) nextArray(rd *dialect.Reader) (*audit.Record, error) {
	if !d.jd.More() {
		d.done = true
		// The closing bracket, then nothing but white space: what follows
		// the array (a second array, a record) would be lost unsaid, and so
		// would the rest of an array that breaks off or is closed by a
		// brace.
		tok, err := d.jd.Token()
		switch {
		case err != nil:
			if re := d.gzipFault(err); re != nil {
				d.errs = append(d.errs, re)
				break
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			d.errs = append(d.errs, &RecordError{Source: d.name, Line: d.line + 1, Reason: fmt.Sprintf("broken JSON array after element %d: %v; what follows is not read", d.line, err)})
		case tok != json.Delim(']'):
			d.errs = append(d.errs, &RecordError{Source: d.name, Line: d.line + 1, Reason: fmt.Sprintf("broken JSON array after element %d: %v instead of , or ]; what follows is not read", d.line, tok)})
		default:
			if _, err = d.jd.Token(); err != io.EOF {
				d.errs = append(d.errs, &RecordError{Source: d.name, Line: d.line + 1, Reason: fmt.Sprintf("content after the JSON array of %d records, not read: send one array, or NDJSON", d.line)})
			}
		}
		return nil, nil
	}
	d.line++
	var raw json.RawMessage
	if err := d.jd.Decode(&raw); err != nil {
		// The array itself is broken: nothing after this point can be
		// located, so the input ends here with what was read.
		d.done = true
		if re := d.gzipFault(err); re != nil {
			re.Line = d.line
			d.errs = append(d.errs, re)
			return nil, nil
		}
		// Where it broke, and that the elements after it are lost with
		// it. The decoder's SyntaxError counts from where its scanner
		// began, not from the body's start (tokens read apart are not
		// counted): the element is scanned again from its start, where the
		// failed Decode left the decoder, for the byte it breaks at, an
		// offset of the (decompressed) body.
		at := ""
		var se *json.SyntaxError
		if errors.As(err, &se) {
			start := d.jd.InputOffset()
			var again json.RawMessage
			if errors.As(json.NewDecoder(d.jd.Buffered()).Decode(&again), &se) {
				at = fmt.Sprintf(" at byte offset %d", start+se.Offset-1)
			}
		}
		d.errs = append(d.errs, &RecordError{Source: d.name, Line: d.line, Reason: fmt.Sprintf("broken JSON array after element %d%s: %v; what follows is not read", d.line-1, at, err)})
		return nil, nil
	}
	return d.parse(raw, rd), nil
}
