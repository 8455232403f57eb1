package receiver

import (
	"github.com/valyala/fastjson"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/mcpaudit/mcpaudit/collector/otlp"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// An OTLP JSON body over maxSalvagedJSON is not parsed into one tree (its
// cost, up to 45 times the body, is what that cap bounds): its envelope is
// walked where it lies, each span parsed into a tree of its own, one at a
// time, and the body rebuilt with each broken span replaced by {}. Until
// adv48 such a body was refused whole: one span with a time that is not
// an integer, among 10,000 good ones in 4.5 MB, had the exporter drop all
// of them on the 400, whose message named no span.

// salvageStreamJSON salvages the OTLP JSON request b, which pdata refused,
// span by span. ok is false when b is not one object of well-matched
// brackets with nothing after it, a span is larger than maxSalvagedJSON
// (its tree would cost what the cap bounds), no span is to blame, or the
// request still does not decode without the blamed spans (a broken
// resource or scope, or an envelope key spelt with escapes, which the walk
// does not follow).
func salvageStreamJSON(b []byte) (s salvaged, ok bool) {
	var p fastjson.Parser
	cv := otlp.NewConverter()
	// One pass per fault finder: the checks of the converter first, then,
	// for at most maxProbed spans, pdata's decoding of each span alone.
	if s, ok = rebuildStreamJSON(b, &p, cv.CheckSpanJSON); ok {
		return s, true
	}
	n := 0
	if !jsonSpans(b, func(_ [3]int, _, _ int) bool { n++; return true }) || n > maxProbed {
		return salvaged{}, false
	}
	return rebuildStreamJSON(b, &p, func(v *fastjson.Value) (string, string) { return jsonSpanFault(cv, v) })
}

// rebuildStreamJSON returns b with each span that fault blames replaced by
// {}, when that decodes.
func rebuildStreamJSON(b []byte, p *fastjson.Parser, fault func(*fastjson.Value) (why, kind string)) (s salvaged, ok bool) {
	var out []byte
	from := 0
	whole := jsonSpans(b, func(idx [3]int, start, end int) bool {
		if end-start > maxSalvagedJSON {
			return false
		}
		v, err := p.ParseBytes(b[start:end])
		why, kind := "", ""
		if err != nil {
			// The walk matched its brackets, so this is a bad literal or a
			// string the walk took and the parser does not.
			why = "cannot parse the span: " + err.Error()
		} else {
			why, kind = fault(v)
		}
		if why == "" {
			return true
		}
		if kind == "" {
			kind = string(metrics.RejectBadSpan)
		}
		s.bad = append(s.bad, otlp.RejectedSpan{Path: spanPath(idx[0], idx[1], idx[2]), Reason: why, Kind: kind})
		if out == nil {
			out = make([]byte, 0, len(b))
		}
		out = append(append(out, b[from:start]...), "{}"...)
		from = end
		return true
	})
	if !whole || len(s.bad) == 0 {
		return salvaged{}, false
	}
	out = append(out, b[from:]...)
	s.req = ptraceotlp.NewExportRequest()
	if s.req.UnmarshalJSON(out) != nil {
		return salvaged{}, false
	}
	s.b = out
	return s, true
}

// jsonSpans calls fn with the indexes (resource spans, scope spans, span)
// and the byte range of each span object of the OTLP JSON request b, in
// order, without decoding anything (walkEnvelope). It stops when fn returns
// false, and reports whether it walked b whole: one object of well-matched
// brackets with nothing but white space after it, and fn never false.
func jsonSpans(b []byte, fn func(idx [3]int, start, end int) bool) bool {
	rootEnd, ok := walkEnvelope(b, nil, func(f envFrame, end int) bool {
		return f.role != jSpan || fn(f.idx, f.start, end)
	})
	return ok && bytesStart(b[rootEnd:]) == len(b)-rootEnd
}

// The role of a container of an OTLP JSON request's envelope
// (walkEnvelope), by its level (1 the request).
const (
	jOther = iota
	jRequest
	jRSList
	jRS
	jResource
	jSSList
	jSS
	jScope
	jSpanList
	jSpan
)

// envFrame is a container of the envelope open in walkEnvelope.
type envFrame struct {
	role    int
	wantKey bool
	key     []byte
	n       int    // resource spans, scope spans or spans met (request, rs, ss)
	idx     [3]int // resource spans, scope spans, span; -1 for the levels below
	start   int
}

// walkEnvelope follows the brackets of the OTLP JSON request b and the
// keys of its envelope (resourceSpans, resource, scopeSpans, scope, spans,
// or the snake_case names, spelt plainly) without decoding anything:
// salvageDeepJSON and the span-by-span salvage (jsonSpans) walk a refused
// body with it. open, when set, is called at each '{' or '[' (offset i)
// with the nesting depth it opens and the envelope's containers open
// around it, innermost last; closed at the end (offset end, past the
// bracket) of each container of the envelope's levels. Either returning
// false stops the walk. It returns the offset past the request's closing
// bracket, and false when it stopped, b does not start with an object, or
// its brackets do not match before b ends; what follows rootEnd is the
// callers' to judge.
func walkEnvelope(b []byte, open func(i, depth int, env []envFrame) bool, closed func(f envFrame, end int) bool) (rootEnd int, ok bool) {
	var (
		brackets []byte // the open brackets, each level
		env      []envFrame
	)
	rootEnd = -1
	key := func(k []byte, a, b string) bool { return string(k) == a || string(k) == b }
	for i := 0; i < len(b) && rootEnd < 0; i++ {
		c := b[i]
		switch c {
		case ' ', '\t', '\r', '\n':
		case '"':
			end := stringEnd(b, i+1)
			if len(env) == len(brackets) && len(env) > 0 && env[len(env)-1].wantKey {
				env[len(env)-1].key, env[len(env)-1].wantKey = b[i+1:min(end, len(b))], false
			}
			i = end
		case ',':
			if len(env) == len(brackets) && len(env) > 0 && brackets[len(brackets)-1] == '{' {
				env[len(env)-1].wantKey = true
			}
		case '{', '[':
			if len(brackets) == 0 && (c != '{' || i != bytesStart(b)) {
				return 0, false
			}
			brackets = append(brackets, c)
			if open != nil && !open(i, len(brackets), env) {
				return 0, false
			}
			// Below a span nothing is followed: its brackets are counted.
			if len(env) != len(brackets)-1 || len(env) >= 7 {
				continue
			}
			f := envFrame{role: jOther, start: i, wantKey: c == '{'}
			if len(env) == 0 {
				f.role = jRequest
			} else {
				p := &env[len(env)-1]
				switch {
				case p.role == jRequest && c == '[' && key(p.key, "resourceSpans", "resource_spans"):
					f.role = jRSList
				case p.role == jRSList && c == '{':
					f.role, f.idx = jRS, [3]int{env[0].n, -1, -1}
					env[0].n++
				case p.role == jRS && c == '{' && key(p.key, "resource", "resource"):
					f.role, f.idx = jResource, p.idx
				case p.role == jRS && c == '[' && key(p.key, "scopeSpans", "scope_spans"):
					f.role, f.idx = jSSList, p.idx
				case p.role == jSSList && c == '{':
					rs := &env[len(env)-2]
					f.role, f.idx = jSS, [3]int{p.idx[0], rs.n, -1}
					rs.n++
				case p.role == jSS && c == '{' && key(p.key, "scope", "scope"):
					f.role, f.idx = jScope, p.idx
				case p.role == jSS && c == '[' && key(p.key, "spans", "spans"):
					f.role, f.idx = jSpanList, p.idx
				case p.role == jSpanList && c == '{':
					ss := &env[len(env)-2]
					f.role, f.idx = jSpan, [3]int{p.idx[0], p.idx[1], ss.n}
					ss.n++
				}
			}
			env = append(env, f)
		case '}', ']':
			if len(brackets) == 0 || brackets[len(brackets)-1] != c-2 { // '{'+2 == '}', '['+2 == ']'
				return 0, false
			}
			brackets = brackets[:len(brackets)-1]
			if len(env) == len(brackets)+1 {
				f := env[len(env)-1]
				env = env[:len(env)-1]
				if !closed(f, i+1) {
					return 0, false
				}
			}
			if len(brackets) == 0 {
				rootEnd = i + 1
			}
		}
	}
	return rootEnd, rootEnd >= 0
}
