package capture

import (
	"bytes"
	"strconv"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/valyala/fastjson"
)

// parseFast reads a record without a fastjson tree of its envelope: one
// pass over its members cuts out the texts parse reads and checks the rest
// as strict JSON; only the arguments, the result and the error data are
// parsed by fastjson, for the reader, each from its own text. The tree of
// the whole record, the lookups of its members and the second search for
// the arguments' text were about 17 % of analyze's CPU (docs/benchmarks.md).
//
// It declines (ok false) what it would not read exactly as parse does: an
// escape in a key or in a text of the envelope, a repeated member, a value
// of another type than parse expects, deep nesting, and anything parse
// rejects. parse then reads the record: the call, every error and its
// message are parse's. What parseFast accepts, fastjson accepts too, with
// the same values. The call comes without its payloads (parse's keep
// false).
func (rp *RecordParser) parseFast(data []byte, source string, line int) (*audit.Call, bool) {
	var e envelope
	i := skipSpace(data, 0)
	end, ok := eachMember(data, i, func(key []byte, v int) (int, bool) { return e.member(data, key, v) })
	if !ok || skipSpace(data, end) != len(data) {
		return nil, false
	}
	ts, server := e.text[mTime], e.text[mServer]
	if ts == nil || len(server) == 0 || !e.got[mRequest] {
		return nil, false
	}
	t, ok := parseUTCMicro(ts)
	if !ok {
		return nil, false
	}
	method := e.method
	if (len(method) == 0 || string(method) == "tools/call") && len(e.tool) == 0 {
		return nil, false
	}
	// The payloads, each parsed alone: fastjson checks them as the parse
	// of the whole record would, but for depth, which counts from the
	// record there. A value of fewer brackets than the margin cannot be
	// too deep.
	var args, result, errData *fastjson.Value
	for _, p := range [...]struct {
		text []byte
		p    *fastjson.Parser
		v    **fastjson.Value
	}{{e.args, &rp.pa, &args}, {e.result, &rp.pr, &result}, {e.errData, &rp.pe, &errData}} {
		if p.text == nil {
			continue
		}
		if bytes.Count(p.text, []byte{'{'})+bytes.Count(p.text, []byte{'['}) >= fastjson.MaxDepth-fastDepth {
			return nil, false
		}
		v, err := p.p.ParseBytes(p.text)
		if err != nil {
			return nil, false
		}
		*p.v = v
	}

	c := &rp.call
	*c = audit.Call{Time: t}
	tx := &rp.text
	tx.reset()
	var rd recordRead
	rd.src.start = len(tx.buf)
	tx.buf = append(append(tx.buf, source...), ':')
	tx.buf = strconv.AppendInt(tx.buf, int64(line), 10)
	rd.src.end = len(tx.buf)
	rd.server = tx.add(server)
	for i, m := range optionalMembers {
		rd.opt[i] = tx.add(e.text[m])
	}
	if e.got[mDuration] {
		c.Duration = time.Duration(float64(e.duration) * float64(time.Millisecond))
	}
	rd.rpc = tx.add(e.rpc)
	rd.method = tx.add(method)
	rd.tool = tx.add(e.tool)
	if e.got[mResponse] {
		c.Responded = true
		if e.rpcErr {
			c.Error = &audit.RPCError{Message: string(e.errMsg), Code: e.errCode}
			rd.errData = errData
		} else {
			rd.result = result
		}
	}
	if args != nil {
		rd.args = args
		rd.rawArgs, rd.rawCanonical = canonicalAt(data, e.argsAt)
	}
	return rp.finish(c, &rd), true
}

// fastDepth is how deep parseFast checks JSON itself: deeper, it declines.
// It is far below fastjson's MaxDepth, so that nothing it accepts is too
// deep for the parse of the whole record.
const fastDepth = 64

// envelope is what parseFast cuts out of a record: views of its texts
// (strings without escapes) and of its payloads' texts.
type envelope struct {
	got      [nMembers]bool   // the member is present and not null
	present  [nMembers]bool   // the member is present, null or not
	text     [nMembers][]byte // the text members
	duration int64
	rpc      []byte
	method   []byte
	tool     []byte
	// args is the arguments' text, at argsAt; nil when absent or null.
	args    []byte
	argsAt  int
	result  []byte
	errData []byte
	errMsg  []byte
	errCode int64
	rpcErr  bool
	// seen marks the members of the request, its params, the response and
	// its error already read: a repeated one declines.
	seen uint16
}

// Bits of envelope.seen.
const (
	seenID = 1 << iota
	seenMethod
	seenParams
	seenName
	seenArguments
	seenError
	seenResult
	seenMessage
	seenCode
	seenData
)

// once notes the member bit; false when it was read before.
func (e *envelope) once(bit uint16) bool {
	if e.seen&bit != 0 {
		return false
	}
	e.seen |= bit
	return true
}

// member reads the record's member key, whose value starts at v, and
// returns where the value ends.
func (e *envelope) member(b []byte, key []byte, v int) (int, bool) {
	m := memberOf(key)
	if m < 0 {
		return skipValue(b, v, 2)
	}
	if e.present[m] {
		return 0, false
	}
	e.present[m] = true
	if isNull(b, v) {
		// As absent, but for the time, which must be a string (declined
		// below when missing), and the request, which must be an object.
		return v + 4, m != mRequest
	}
	e.got[m] = true
	switch m {
	case mDuration:
		n, end, ok := plainInt(b, v, 15)
		e.duration = n
		return end, ok && n >= 0 && b[v] != '-'
	case mRequest:
		return eachMember(b, v, func(key []byte, v int) (int, bool) { return e.request(b, key, v) })
	case mResponse:
		return eachMember(b, v, func(key []byte, v int) (int, bool) { return e.response(b, key, v) })
	}
	s, end, ok := plainString(b, v)
	e.text[m] = s
	return end, ok
}

// request reads a member of the record's request.
func (e *envelope) request(b []byte, key []byte, v int) (int, bool) {
	switch string(key) {
	case "id":
		if !e.once(seenID) {
			return 0, false
		}
		if isNull(b, v) {
			return v + 4, true
		}
		if v < len(b) && b[v] == '"' {
			s, end, ok := plainString(b, v)
			e.rpc = s
			return end, ok
		}
		end, ok := skipNumber(b, v)
		if ok {
			e.rpc = b[v:end]
		}
		return end, ok
	case "method":
		if !e.once(seenMethod) {
			return 0, false
		}
		s, end, ok := plainString(b, v)
		e.method = s
		return end, ok
	case "params":
		if !e.once(seenParams) {
			return 0, false
		}
		return eachMember(b, v, func(key []byte, v int) (int, bool) { return e.params(b, key, v) })
	}
	return skipValue(b, v, 3)
}

// params reads a member of the request's params.
func (e *envelope) params(b []byte, key []byte, v int) (int, bool) {
	switch string(key) {
	case "name":
		if !e.once(seenName) {
			return 0, false
		}
		s, end, ok := plainString(b, v)
		e.tool = s
		return end, ok
	case "arguments":
		if !e.once(seenArguments) {
			return 0, false
		}
		if isNull(b, v) {
			return v + 4, true
		}
		end := canon.ValueEnd(b, v)
		e.args, e.argsAt = b[v:end], v
		return end, end > v
	}
	return skipValue(b, v, 4)
}

// response reads a member of the record's response.
func (e *envelope) response(b []byte, key []byte, v int) (int, bool) {
	switch string(key) {
	case "error":
		if !e.once(seenError) {
			return 0, false
		}
		if isNull(b, v) {
			return v + 4, true
		}
		e.rpcErr = true
		return eachMember(b, v, func(key []byte, v int) (int, bool) { return e.rpcError(b, key, v) })
	case "result":
		if !e.once(seenResult) {
			return 0, false
		}
		if isNull(b, v) {
			return v + 4, true
		}
		end := canon.ValueEnd(b, v)
		e.result = b[v:end]
		return end, end > v
	}
	return skipValue(b, v, 3)
}

// rpcError reads a member of the response's error.
func (e *envelope) rpcError(b []byte, key []byte, v int) (int, bool) {
	switch string(key) {
	case "message":
		if !e.once(seenMessage) {
			return 0, false
		}
		s, end, ok := plainString(b, v)
		e.errMsg = s
		return end, ok
	case "code":
		if !e.once(seenCode) {
			return 0, false
		}
		n, end, ok := plainInt(b, v, 18)
		e.errCode = n
		return end, ok
	case "data":
		if !e.once(seenData) {
			return 0, false
		}
		if isNull(b, v) {
			return v + 4, true
		}
		end := canon.ValueEnd(b, v)
		e.errData = b[v:end]
		return end, end > v
	}
	return skipValue(b, v, 4)
}

// eachMember calls f with the key of each member of the object at b[i:]
// and the start of its value; f returns where the value ends. It returns
// where the object ends. A key with an escape, or any JSON error, is not
// ok.
func eachMember(b []byte, i int, f func(key []byte, v int) (int, bool)) (int, bool) {
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		key, end, ok := plainString(b, i)
		if !ok {
			return 0, false
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		if i, ok = f(key, skipSpace(b, i+1)); !ok {
			return 0, false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case '}':
			return i + 1, true
		case ',':
			i = skipSpace(b, i+1)
		default:
			return 0, false
		}
	}
}

// plainString returns the text of the string at b[i:], which must have no
// escape, and where it ends.
func plainString(b []byte, i int) (s []byte, end int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	n := bytes.IndexByte(b[i+1:], '"')
	if n < 0 {
		return nil, 0, false
	}
	s = b[i+1 : i+1+n]
	if bytes.IndexByte(s, '\\') >= 0 {
		return nil, 0, false
	}
	return s, i + n + 2, true
}

// isNull reports whether b[i:] starts with the literal null.
func isNull(b []byte, i int) bool {
	return i+4 <= len(b) && string(b[i:i+4]) == "null"
}

// plainInt reads the integer at b[i:] of at most digits digits, in JSON's
// form (no leading zero), and returns where it ends.
func plainInt(b []byte, i, digits int) (n int64, end int, ok bool) {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	k := j
	for k < len(b) && '0' <= b[k] && b[k] <= '9' {
		k++
	}
	if k == j || k-j > digits || b[j] == '0' && k-j > 1 {
		return 0, 0, false
	}
	n, err := strconv.ParseInt(string(b[i:k]), 10, 64)
	return n, k, err == nil
}

// skipValue returns where the JSON value at b[i:] ends, checked as strict
// JSON; depth is the value's depth in the record (the record is 1).
func skipValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{':
		if depth > fastDepth {
			return 0, false
		}
		return eachMember(b, i, func(_ []byte, v int) (int, bool) { return skipValue(b, v, depth+1) })
	case '[':
		if depth > fastDepth {
			return 0, false
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, true
		}
		for {
			end, ok := skipValue(b, i, depth+1)
			if !ok {
				return 0, false
			}
			i = skipSpace(b, end)
			if i >= len(b) {
				return 0, false
			}
			switch b[i] {
			case ']':
				return i + 1, true
			case ',':
				i = skipSpace(b, i+1)
			default:
				return 0, false
			}
		}
	case 't':
		return i + 4, bytes.HasPrefix(b[i:], []byte("true"))
	case 'f':
		return i + 5, bytes.HasPrefix(b[i:], []byte("false"))
	case 'n':
		return i + 4, isNull(b, i)
	}
	return skipNumber(b, i)
}

// skipString returns where the string at b[i:] ends.
func skipString(b []byte, i int) (int, bool) {
	j := i + 1
	for {
		n := bytes.IndexByte(b[j:], '"')
		if n < 0 {
			return 0, false
		}
		j += n
		k := j
		for k > i+1 && b[k-1] == '\\' {
			k--
		}
		j++
		if (j-1-k)%2 == 0 {
			return j, true
		}
	}
}

// skipNumber returns where the number at b[i:] ends, in JSON's strict
// form: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func skipNumber(b []byte, i int) (int, bool) {
	digits := func(j int) int {
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
		return j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	j := digits(i)
	if j == i || b[i] == '0' && j > i+1 {
		return 0, false
	}
	if j < len(b) && b[j] == '.' {
		k := digits(j + 1)
		if k == j+1 {
			return 0, false
		}
		j = k
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		k := digits(j)
		if k == j {
			return 0, false
		}
		j = k
	}
	return j, true
}
