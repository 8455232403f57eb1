package capture

import (
	"container/heap"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"github.com/valyala/fastjson"
)

// OTLP JSON inputs are read in two passes over each document, so that a
// document of any size streams:
//
//  1. An index pass walks the document's structure without parsing values:
//     it finds each resourceSpans element (a block: one exporting resource),
//     its resource, and the start time of every span, to know when each
//     block's calls begin and how far out of time order they come (an
//     exporter sends spans in the order they end).
//  2. The blocks are then read again, each from its own offset, and their
//     calls merged by time: a block is opened when the merge reaches its
//     first call, and its spans are parsed one at a time (fastjson), put in
//     time order through a buffer as deep as the block's disorder, and read
//     by their dialect. The calls come out in the order a stable sort of
//     the document by time would give, with memory bounded by the blocks
//     open at once and the disorder within them, not by the document.
//
// The second pass reads the input at offsets: a file is read where it is;
// other inputs (standard input, gzip) are spooled as they are read, in
// memory up to spoolMemory bytes and in a temporary file past that, one
// document at a time.

// block is one resourceSpans element of an OTLP JSON document.
type block struct {
	// index is i of resourceSpans[i]; seq orders blocks of one document.
	index int
	// start and end are the stream offsets of the element's text.
	start, end int64
	// resources are the stream offsets of its resource objects (a
	// repeated field adds attributes).
	resources [][2]int64
	// deprecated is set when its spans are under deprecatedScopeSpans
	// only (pdata reads those when scopeSpans is empty).
	deprecated bool
	// first is the earliest start of its spans, rounded as call times are
	// (nanoseconds since 1970); lag is how far behind an earlier span of
	// the block a span starts, at most.
	first, lag int64
	// broken is set when the document breaks inside the block: it is read
	// up to the break.
	broken bool
	// scope counts the scopeSpans items of either kind, to choose.
	scopes [2]int
	// timing of either kind, chosen with it.
	timing [2]blockTiming
}

// blockTiming follows the start times of a block's spans in text order.
type blockTiming struct {
	first, max, lag int64
	any             bool
}

func (t *blockTiming) add(ns int64) {
	switch {
	case !t.any:
		t.first, t.max, t.any = ns, ns, true
	case ns > t.max:
		t.max = ns
	default:
		t.lag = max(t.lag, t.max-ns)
		t.first = min(t.first, ns)
	}
}

// roundStart rounds a span start as a call's time is rounded.
func roundStart(ns uint64) int64 {
	return time.Unix(0, int64(ns)).Round(time.Microsecond).UnixNano()
}

// document is one top-level OTLP JSON value of the input.
type document struct {
	line    int  // line it starts on
	oneLine bool // it ends on that line: its spans' errors name it
	end     int64
	blocks  []*block
}

// Names of the fields the index pass walks, in both spellings.
func isKey(k []byte, names ...string) bool {
	for _, n := range names {
		if string(k) == n {
			return true
		}
	}
	return false
}

// indexDocument walks the next document of the input (c at its first
// byte). A document that breaks keeps the blocks before the break; err
// says where it broke.
func indexDocument(c *cursor) (doc *document, err error) {
	doc = &document{line: c.line()}
	if b, _ := c.peek(); b != '{' {
		return doc, c.fail("not an OTLP JSON document (a JSON object with resourceSpans)")
	}
	c.i++
	for first := true; ; first = false {
		ok, err := c.more('}', first)
		if err != nil || !ok {
			doc.end = c.pos()
			doc.oneLine = c.line() == doc.line
			return doc, err
		}
		k, err := c.key()
		if err != nil {
			return doc, err
		}
		if !isKey(k, "resourceSpans", "resource_spans") {
			if err := c.skip(); err != nil {
				return doc, err
			}
			continue
		}
		if err := indexArray(c, func(i int) error {
			b := &block{index: len(doc.blocks)}
			doc.blocks = append(doc.blocks, b)
			err := indexBlock(c, b)
			if err != nil {
				b.broken, b.end = true, c.pos()
			}
			return err
		}); err != nil {
			return doc, err
		}
	}
}

// indexArray walks an array (or null) calling item at each item.
func indexArray(c *cursor, item func(i int) error) error {
	b, ok := c.peek()
	if !ok {
		return c.fail("%v", errTruncated)
	}
	if b != '[' {
		if b == 'n' {
			return c.skip()
		}
		return c.fail("want an array, found %q", b)
	}
	c.i++
	for i := 0; ; i++ {
		ok, err := c.more(']', i == 0)
		if err != nil || !ok {
			return err
		}
		if err := item(i); err != nil {
			return err
		}
	}
}

// indexObject walks an object (or null) calling member at each member,
// which must take its value.
func indexObject(c *cursor, member func(k []byte) error) error {
	b, ok := c.peek()
	if !ok {
		return c.fail("%v", errTruncated)
	}
	if b != '{' {
		if b == 'n' {
			return c.skip()
		}
		return c.fail("want an object, found %q", b)
	}
	c.i++
	for first := true; ; first = false {
		ok, err := c.more('}', first)
		if err != nil || !ok {
			return err
		}
		k, err := c.key()
		if err != nil {
			return err
		}
		if err := member(k); err != nil {
			return err
		}
	}
}

func indexBlock(c *cursor, b *block) error {
	c.peek()
	b.start = c.pos()
	err := indexObject(c, func(k []byte) error {
		switch {
		case isKey(k, "resource"):
			c.peek()
			start := c.pos()
			if err := c.skip(); err != nil {
				return err
			}
			b.resources = append(b.resources, [2]int64{start, c.pos()})
			return nil
		case isKey(k, "scopeSpans", "scope_spans", "deprecatedScopeSpans", "deprecated_scope_spans"):
			kind := 0
			if k[0] == 'd' {
				kind = 1
			}
			return indexArray(c, func(int) error {
				b.scopes[kind]++
				return indexObject(c, func(k []byte) error {
					if !isKey(k, "spans") {
						return c.skip()
					}
					return indexArray(c, func(int) error { return indexSpan(c, &b.timing[kind]) })
				})
			})
		}
		return c.skip()
	})
	b.end = c.pos()
	b.deprecated = b.scopes[0] == 0 && b.scopes[1] > 0
	t := b.timing[0]
	if b.deprecated {
		t = b.timing[1]
	}
	b.first, b.lag = t.first, t.lag
	return err
}

// indexSpan notes the start time of the span at the cursor. A span that
// is not an object is left for the read pass to reject.
func indexSpan(c *cursor, t *blockTiming) error {
	if b, _ := c.peek(); b != '{' {
		return c.skip()
	}
	var start uint64
	err := indexObject(c, func(k []byte) error {
		if !isKey(k, "startTimeUnixNano", "start_time_unix_nano") {
			return c.skip()
		}
		text, ok, err := c.literal()
		if ok {
			start, _ = strconv.ParseUint(string(text), 10, 64)
		}
		return err
	})
	if start > 0 {
		t.add(roundStart(start))
	}
	return err
}

// otlpReader reads the calls of an OTLP JSON input in time order per
// document.
type otlpReader struct {
	name string
	c    *cursor
	// at reads the input at stream offsets: the file itself (base is the
	// file offset of stream offset 0), or the spool.
	at    io.ReaderAt
	base  int64
	spool *spool
	// doc is the document being read; pending its blocks not yet opened,
	// by first call; open the blocks being merged.
	doc     *document
	pending []*block
	open    blockHeap
	done    bool
	// jsonLines is set once a document ended on its line: each line is
	// then a document, and a break costs its line only.
	jsonLines bool

	conv   *otlp.Converter
	spanP  fastjson.Parser
	resP   fastjson.Parser
	resBuf []byte
	// out receives the rejects and the count of ignored spans.
	reject  func(error)
	ignored *int
	// fault, when set, turns an error reading the input into the reject
	// of its rest (a gzip stream cut off), nil for another error.
	fault func(error) *RecordError
}

// readFault ends the input at err, an error reading it: when fault makes
// it a reject of the rest, that is reported and nil returned; otherwise
// the error.
func (o *otlpReader) readFault(err error) error {
	if o.fault != nil {
		if re := o.fault(err); re != nil {
			o.done = true
			re.Line = o.c.line()
			o.reject(re)
			return nil
		}
	}
	return fmt.Errorf("cannot read %s: %w", o.name, err)
}

func newOTLPReader(name string, r io.Reader, at io.ReaderAt, base int64, keep bool, reject func(error), ignored *int) *otlpReader {
	o := &otlpReader{name: name, at: at, base: base, reject: reject, ignored: ignored, conv: otlp.NewConverter()}
	o.conv.Keep = keep
	if at == nil {
		o.spool = newSpool()
		o.at = o.spool
		r = io.TeeReader(r, o.spool)
	}
	o.c = newCursor(r, 1<<16, MaxLine)
	return o
}

// next returns the next call read by rd (nil: the call only), or nil at
// the end of the input; known is what its span told beside its payloads.
func (o *otlpReader) next(rd *dialect.Reader) (*audit.Record, dialect.Known, error) {
	for {
		if len(o.open) == 0 && len(o.pending) == 0 {
			if o.done {
				return nil, dialect.Known{}, nil
			}
			if err := o.nextDocument(); err != nil {
				return nil, dialect.Known{}, err
			}
			continue
		}
		// Open the blocks whose first call comes before the merge's next.
		for len(o.pending) > 0 && (len(o.open) == 0 || o.pending[0].first <= o.open[0].head.Call.Time.UnixNano()) {
			b := o.pending[0]
			o.pending = o.pending[1:]
			bs, err := o.openBlock(b)
			if err != nil {
				return nil, dialect.Known{}, err
			}
			if err := bs.advance(rd); err != nil {
				return nil, dialect.Known{}, err
			}
			if bs.head != nil {
				heap.Push(&o.open, bs)
			}
		}
		if len(o.open) == 0 {
			continue
		}
		bs := o.open[0]
		r, known := bs.head, bs.known
		if err := bs.advance(rd); err != nil {
			return nil, dialect.Known{}, err
		}
		if bs.head == nil {
			heap.Pop(&o.open)
		} else {
			heap.Fix(&o.open, 0)
		}
		return r, known, nil
	}
}

// nextDocument indexes the next document of the input.
func (o *otlpReader) nextDocument() error {
	c := o.c
	if o.spool != nil && o.doc != nil {
		o.spool.discard(o.doc.end)
	}
	o.doc = nil
	if _, ok := c.peek(); !ok {
		o.done = true
		if c.rerr != nil && c.rerr != io.EOF {
			return o.readFault(c.rerr)
		}
		return nil
	}
	c.lineMode = o.jsonLines
	doc, err := indexDocument(c)
	c.lineMode = false
	if err != nil {
		if se, ok := err.(*syntaxError); ok {
			doc.oneLine = se.Line == doc.line
			o.reject(&RecordError{Source: o.name, Line: se.Line, Reason: o.broken(doc, se)})
		} else {
			// The document being indexed is lost with the rest: its
			// calls come out only once it is whole.
			return o.readFault(err)
		}
	} else if doc.oneLine {
		// A document on one line: the input is read as one document per
		// line from now on (the Collector's file exporter writes so).
		o.jsonLines = true
	}
	doc.end = max(doc.end, c.pos())
	o.doc = doc
	o.pending = append(o.pending[:0], doc.blocks...)
	// Blocks open in the order of their first call; a stable sort keeps
	// the document's order among equals, which the merge keeps too.
	sortBlocks(o.pending)
	return nil
}

// broken says what a break in a document costs, and moves the cursor
// past what is lost: in a file of one document per line, the rest of the
// line; otherwise up to the next line that starts a document, or the rest
// of the input.
func (o *otlpReader) broken(doc *document, se *syntaxError) string {
	c := o.c
	reason := "broken OTLP JSON at byte " + strconv.FormatInt(se.Offset, 10) + ": " + se.Reason
	if o.jsonLines || se.Line == doc.line {
		if !c.skipLine() {
			return reason
		}
		return reason + "; the rest of the line is skipped"
	}
	for c.skipLine() {
		if c.startsDocument() {
			return reason + "; skipped to line " + strconv.Itoa(c.line())
		}
	}
	o.done = true
	return reason + "; the rest of the input is skipped"
}

func sortBlocks(bs []*block) {
	// Insertion sort: documents have few blocks, often in order already.
	for i := 1; i < len(bs); i++ {
		for j := i; j > 0 && bs[j].first < bs[j-1].first; j-- {
			bs[j], bs[j-1] = bs[j-1], bs[j]
		}
	}
}

// openBlock starts reading a block: its resource, then its spans.
func (o *otlpReader) openBlock(b *block) (*blockStream, error) {
	var objs []*fastjson.Value
	var ps []fastjson.Parser
	if len(b.resources) > 1 {
		ps = make([]fastjson.Parser, len(b.resources))
	}
	for i, r := range b.resources {
		n := r[1] - r[0]
		if n > int64(MaxLine) {
			o.reject(&RecordError{Source: o.name, Line: o.spanLine(), Reason: fmt.Sprintf("resourceSpans[%d].resource: longer than %d bytes", b.index, MaxLine), Kind: kindTooLarge})
			continue
		}
		o.resBuf = slices.Grow(o.resBuf[:0], int(n))[:n]
		if _, err := o.at.ReadAt(o.resBuf, o.base+r[0]); err != nil {
			return nil, fmt.Errorf("cannot read %s: %w", o.name, err)
		}
		p := &o.resP
		if ps != nil {
			p = &ps[i]
		}
		v, err := p.ParseBytes(o.resBuf)
		if err != nil {
			o.reject(&RecordError{Source: o.name, Line: o.spanLine(), Reason: fmt.Sprintf("resourceSpans[%d].resource: not JSON: %s", b.index, canon.ParseError(o.resBuf, err))})
			continue
		}
		if !canon.Valid(v) {
			o.reject(&RecordError{Source: o.name, Line: o.spanLine(), Reason: fmt.Sprintf("resourceSpans[%d].resource: not JSON: %s", b.index, canon.Fault(o.resBuf))})
			continue
		}
		objs = append(objs, v)
	}
	bs := &blockStream{o: o, b: b, res: otlp.ResourceJSON(objs)}
	sr := io.NewSectionReader(o.at, o.base+b.start, b.end-b.start)
	bs.c = newCursor(sr, 1<<16, MaxLine)
	bs.c.off = b.start
	return bs, nil
}

// spanLine is the line that the errors of the current document's spans
// name: its line in a JSON-lines file, else none.
func (o *otlpReader) spanLine() int {
	if o.doc != nil && o.doc.oneLine {
		return o.doc.line
	}
	return 0
}

// blockStream reads the calls of one block in time order.
type blockStream struct {
	o   *otlpReader
	b   *block
	c   *cursor
	res otlp.Resource
	// head is the block's next call in time order, nil once it has none;
	// known is what its span told beside its payloads.
	head  *audit.Record
	known dialect.Known
	// held are calls read but not yet in order: a call is released once
	// the block has shown a start later than its time by its lag.
	held recHeap
	seq  int
	// latest is the latest start read so far.
	latest int64
	any    bool
	// walk is where the walk is: 0 in the block's members, 1 in a
	// scopeSpans array, 2 in a scopeSpans item's members, 3 in a spans
	// array; 4 at the end.
	walk           int
	entered, first bool
	j, k           int
}

// advance sets head to the block's next call.
func (bs *blockStream) advance(rd *dialect.Reader) error {
	for {
		if len(bs.held) > 0 && (bs.walk == 4 || bs.held[0].t <= bs.latest-bs.b.lag) {
			h := heap.Pop(&bs.held).(heldRec)
			bs.head, bs.known = h.r, h.known
			return nil
		}
		if bs.walk == 4 {
			bs.head = nil
			return nil
		}
		text, j, k, ok := bs.nextSpan()
		if !ok {
			bs.walk = 4
			continue
		}
		if text == nil {
			continue // too long, reported
		}
		o := bs.o
		v, err := o.spanP.ParseBytes(text)
		if err != nil {
			o.reject(&SpanError{Source: o.name, Line: o.spanLine(), RejectedSpan: otlp.RejectedSpan{Path: spanPath(bs.b.index, j, k), Reason: "not JSON: " + canon.ParseError(text, err)}})
			continue
		}
		if !canon.Valid(v) {
			// fastjson takes NaN and 1.2.3 as numbers and control bytes and
			// \x in strings; JSON does not.
			o.reject(&SpanError{Source: o.name, Line: o.spanLine(), RejectedSpan: otlp.RejectedSpan{Path: spanPath(bs.b.index, j, k), Reason: "not JSON: " + canon.Fault(text)}})
			continue
		}
		if ns := otlp.StartJSON(v); ns > 0 {
			if t := roundStart(ns); !bs.any || t > bs.latest {
				bs.latest, bs.any = t, true
			}
		}
		rec, ignored, reason, kind := o.conv.JSONSpan(v, &bs.res, o.name+":", bs.b.index, j, k, rd)
		switch {
		case reason != "":
			o.reject(&SpanError{Source: o.name, Line: o.spanLine(), RejectedSpan: otlp.RejectedSpan{Path: spanPath(bs.b.index, j, k), Reason: reason, Kind: kind}})
		case ignored:
			*o.ignored++
		default:
			bs.seq++
			heap.Push(&bs.held, heldRec{r: rec, known: o.conv.Known(), t: rec.Call.Time.UnixNano(), seq: bs.seq})
		}
	}
}

func spanPath(i, j, k int) string {
	return fmt.Sprintf("resourceSpans[%d].scopeSpans[%d].spans[%d]", i, j, k)
}

// nextSpan walks to the block's next span and returns its text (nil when
// it is too long, which it reports) and its place; ok is false at the end
// of the block. The index pass reported the block's syntax errors: the
// walk ends quietly at one.
func (bs *blockStream) nextSpan() (text []byte, j, k int, ok bool) {
	c := bs.c
	for {
		switch bs.walk {
		case 0: // the block's members
			if !bs.entered {
				if b, _ := c.peek(); b != '{' {
					return nil, 0, 0, false
				}
				c.i++
				bs.entered, bs.first, bs.j = true, true, -1
			}
			m, err := c.more('}', bs.first)
			bs.first = false
			if err != nil || !m {
				return nil, 0, 0, false
			}
			key, err := c.key()
			if err != nil {
				return nil, 0, 0, false
			}
			want := isKey(key, "scopeSpans", "scope_spans")
			if bs.b.deprecated {
				want = isKey(key, "deprecatedScopeSpans", "deprecated_scope_spans")
			}
			if b, _ := c.peek(); !want || b != '[' {
				if c.skip() != nil {
					return nil, 0, 0, false
				}
				continue
			}
			c.i++
			bs.walk, bs.first = 1, true
		case 1: // a scopeSpans array
			m, err := c.more(']', bs.first)
			if err != nil {
				return nil, 0, 0, false
			}
			bs.first = false
			if !m {
				bs.walk = 0
				continue
			}
			bs.j++
			bs.k = -1
			if b, _ := c.peek(); b != '{' {
				if c.skip() != nil {
					return nil, 0, 0, false
				}
				continue
			}
			c.i++
			bs.walk, bs.first = 2, true
		case 2: // a scopeSpans item's members
			m, err := c.more('}', bs.first)
			if err != nil {
				return nil, 0, 0, false
			}
			bs.first = false
			if !m {
				bs.walk = 1
				continue
			}
			key, err := c.key()
			if err != nil {
				return nil, 0, 0, false
			}
			if b, _ := c.peek(); !isKey(key, "spans") || b != '[' {
				if c.skip() != nil {
					return nil, 0, 0, false
				}
				continue
			}
			c.i++
			bs.walk, bs.first = 3, true
		case 3: // a spans array
			m, err := c.more(']', bs.first)
			if err != nil {
				return nil, 0, 0, false
			}
			bs.first = false
			if !m {
				bs.walk = 2
				continue
			}
			bs.k++
			text, long, err := c.keep()
			if err != nil {
				return nil, 0, 0, false
			}
			if long {
				o := bs.o
				o.reject(&SpanError{Source: o.name, Line: o.spanLine(), RejectedSpan: otlp.RejectedSpan{Path: spanPath(bs.b.index, bs.j, bs.k), Reason: fmt.Sprintf("longer than %d bytes", MaxLine), Kind: kindTooLarge}})
				return nil, bs.j, bs.k, true
			}
			return text, bs.j, bs.k, true
		default:
			return nil, 0, 0, false
		}
	}
}

// heldRec is a call waiting in its block for its place in time.
type heldRec struct {
	r     *audit.Record
	known dialect.Known
	t     int64
	seq   int
}

type recHeap []heldRec

func (h recHeap) Len() int { return len(h) }
func (h recHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h recHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *recHeap) Push(x any)   { *h = append(*h, x.(heldRec)) }
func (h *recHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = heldRec{}
	*h = old[:len(old)-1]
	return x
}

// blockHeap orders open blocks by their next call, then by their order in
// the document.
type blockHeap []*blockStream

func (h blockHeap) Len() int { return len(h) }
func (h blockHeap) Less(i, j int) bool {
	a, b := h[i].head.Call.Time, h[j].head.Call.Time
	if !a.Equal(b) {
		return a.Before(b)
	}
	return h[i].b.index < h[j].b.index
}
func (h blockHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *blockHeap) Push(x any)   { *h = append(*h, x.(*blockStream)) }
func (h *blockHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return x
}
