package otlp

import (
	"sync"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"google.golang.org/protobuf/encoding/protowire"
)

// MinSplitSpans is the fewest spans a share of ReadProtoSplit reads: a
// request with fewer than twice as many is read by one converter, where a
// goroutine would cost more than it saves.
const MinSplitSpans = 64

// Spans returns the number of spans in m.
func (m Message) Spans() int { return m.spans }

// protoSpan is one span of a checked Message: its bytes, its resource and
// where it is.
type protoSpan struct {
	b []byte
	r *Resource
	p path
}

// ReadProtoSplit is ReadProto with m's spans shared among the converters
// cvs, each with its reader rds[i], in runs of consecutive spans read at
// the same time: one exporter's request of hundreds of spans then takes
// more than one core. The result is ReadProto's, in the same order, and
// ReadProto's when cvs holds one converter or m fewer than 2*MinSplitSpans
// spans. cvs and rds are the caller's until it returns; each is used by
// one goroutine at a time.
func ReadProtoSplit(m Message, source string, cvs []*Converter, rds []*dialect.Reader) Result {
	n := min(len(cvs), len(rds), m.spans/MinSplitSpans)
	if n < 2 {
		return cvs[0].ReadProto(m, source, rds[0])
	}
	spans := indexSpans(m, make([]protoSpan, 0, m.spans))
	parts := make([]Result, n)
	var wg sync.WaitGroup
	for k := 1; k < n; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			share := spans[k*len(spans)/n : (k+1)*len(spans)/n]
			parts[k] = cvs[k].readSpans(share, len(share), m.maxAttrs, source, rds[k])
		}()
	}
	// The first share's lists have room for every span: the others'
	// are appended to them.
	res := cvs[0].readSpans(spans[:len(spans)/n], len(spans), m.maxAttrs, source, rds[0])
	wg.Wait()
	for _, p := range parts[1:] {
		res.Records = append(res.Records, p.Records...)
		res.Sources = append(res.Sources, p.Sources...)
		res.Known = append(res.Known, p.Known...)
		res.Rejected = append(res.Rejected, p.Rejected...)
		res.Ignored += p.Ignored
	}
	if len(res.Records) == 0 {
		// As Read leaves them.
		res.Records, res.Sources, res.Known = nil, nil, nil
	}
	return res
}

// indexSpans appends to out every span of the checked message m, in
// order, with its resource: the walk of walkProto without reading a span.
func indexSpans(m Message, out []protoSpan) []protoSpan {
	i := 0
	fields(m.b, func(_ protowire.Number, _ protowire.Type, rs []byte) bool {
		var resource []byte
		fields(rs, func(num protowire.Number, _ protowire.Type, v []byte) bool {
			if num == 1 {
				resource = v
			}
			return true
		})
		var ra attrs
		resourceAttrs(resource, m.maxAttrs, &ra)
		r := new(Resource)
		*r = resourceOf(&ra)
		j := 0
		fields(rs, func(num protowire.Number, _ protowire.Type, ss []byte) bool {
			if num != 2 {
				return true
			}
			k := 0
			fields(ss, func(num protowire.Number, _ protowire.Type, v []byte) bool {
				if num == 2 {
					out = append(out, protoSpan{b: v, r: r, p: path{i, j, k}})
					k++
				}
				return true
			})
			j++
			return true
		})
		i++
		return true
	})
	return out
}

// readSpans reads spans, of a checked message, into a Result of their
// own whose lists have room for size records.
func (cv *Converter) readSpans(spans []protoSpan, size, maxAttrs int, source string, rd *dialect.Reader) Result {
	res := Result{Records: make([]*audit.Record, 0, size), Sources: make([]string, 0, size), Known: make([]dialect.Known, 0, size)}
	for _, s := range spans {
		if !cv.span(s.b, maxAttrs) {
			// Never in a message CheckProto accepted.
			break
		}
		cv.readSpan(&res, s.r, source, s.p, rd)
	}
	return res
}
