package receiver

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// OTLP values nest (an array of arrays of key-value lists...) without a
// bound in the protocol, and decoding a deep one costs many times its size
// in memory: the depth is checked on the wire, before anything is decoded.

// message kinds of the OTLP trace request, as far as attribute values are
// concerned.
type pbKind uint8

const (
	pbRequest pbKind = iota
	pbResourceSpans
	pbResource
	pbScopeSpans
	pbScope
	pbSpan
	pbEvent
	pbLink
	pbKeyValue
	pbAnyValue
	pbArrayValue
	pbKeyValueList
)

// pbChild returns the kind of the message in field num of a message of
// kind k, and whether it is one that can lead to an attribute value.
func pbChild(k pbKind, num protowire.Number) (pbKind, bool) {
	switch k {
	case pbRequest:
		return pbResourceSpans, num == 1
	case pbResourceSpans:
		switch num {
		case 1:
			return pbResource, true
		case 2:
			return pbScopeSpans, true
		}
	case pbResource:
		return pbKeyValue, num == 1
	case pbScopeSpans:
		switch num {
		case 1:
			return pbScope, true
		case 2:
			return pbSpan, true
		}
	case pbScope:
		return pbKeyValue, num == 3
	case pbSpan:
		switch num {
		case 9:
			return pbKeyValue, true
		case 11:
			return pbEvent, true
		case 13:
			return pbLink, true
		}
	case pbEvent:
		return pbKeyValue, num == 3
	case pbLink:
		return pbKeyValue, num == 4
	case pbKeyValue:
		return pbAnyValue, num == 2
	case pbAnyValue:
		switch num {
		case 5:
			return pbArrayValue, true
		case 6:
			return pbKeyValueList, true
		}
	case pbArrayValue:
		return pbAnyValue, num == 1
	case pbKeyValueList:
		return pbKeyValue, num == 1
	}
	return 0, false
}

var errTooDeep = errors.New("too deep")

// protoValueDepth walks an OTLP ExportTraceServiceRequest on the wire and
// returns an error when an attribute value nests more than limit arrays or
// key-value lists deep. Malformed input is left to the decoder to report.
func protoValueDepth(b []byte, limit int) error {
	err := pbWalk(b, pbRequest, 0, limit)
	if errors.Is(err, errTooDeep) {
		return errors.New(tooDeepReason(limit))
	}
	return nil
}

func pbWalk(b []byte, k pbKind, depth, limit int) error {
	if k == pbArrayValue || k == pbKeyValueList {
		depth++
		if depth > limit {
			return errTooDeep
		}
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if child, ok := pbChild(k, num); ok {
			if err := pbWalk(v, child, depth, limit); err != nil {
				return err
			}
		}
	}
	return nil
}

// jsonBodyDepth is the nesting an OTLP JSON body may reach: the envelope
// (resourceSpans, scopeSpans, spans, attributes, value: about 10 levels)
// and three levels per nested array or key-value list value.
func jsonBodyDepth(limit int) int { return 16 + 3*limit }

// jsonDeepReason is why an OTLP JSON body whose nesting passes limit
// (jsonBodyDepth of serve.receiver.max_depth) at byte offset at is
// refused. It names the setting's value, not only the body's levels, which
// an operator never set (adv22: "deeper than 112 levels" with max_depth 32).
func jsonDeepReason(limit, at int) string {
	return fmt.Sprintf("nested deeper than %d levels at byte offset %d: the envelope's 16 and 3 a level for max_depth %d (serve.receiver.max_depth)", limit, at, (limit-16)/3)
}

// protoFault says why body b, which pdata could not decode (err), is not
// OTLP protobuf. pdata's decoder reads each message from a slice of its
// own and its errors carry no position ("unexpected EOF"): when it ran out
// of bytes, the framing is walked here, down the messages that lead to
// attribute values (pbChild), for the first field whose tag, length or
// bytes run past the end of the message holding it; when that message
// ends where the body does, the body is cut short, and the answer says
// where it ends and inside which field. A tag of an invalid wire type (6
// or 7) in those messages is named with its byte offset and the field
// holding it, whatever pdata said of it ("unexpected EOF" when it ends a
// message, "proto: illegal wireType 7" before). The framing of fields in
// other messages (a span's status, unknown fields) is not walked: a fault
// there is given as pdata says it, without an offset.
func protoFault(b []byte, err error) string {
	if at, ok := pbJunk(b); ok {
		// pdata names a message the body does not hold ("proto: Link:
		// illegal field=0" for one stray 0 byte after it, adv22).
		return fmt.Sprintf("%s: trailing garbage from byte offset %d of %d: byte 0x%02x is no field of the request (field numbers start at 1)", err, at, len(b), b[at])
	}
	eof := errors.Is(err, io.ErrUnexpectedEOF)
	if !eof && !strings.Contains(err.Error(), "illegal wireType") {
		return err.Error()
	}
	f, ok := pbFrame(b, 0, len(b), pbRequest, 0)
	switch {
	case ok && f.wire != 0:
		return fmt.Sprintf("%s: %s", err, f.wireFault(""))
	case !ok || !eof:
		return err.Error()
	case f.cut:
		return fmt.Sprintf("%s: the body is cut short at byte offset %d, inside %s", err, len(b), f.where)
	default:
		return fmt.Sprintf("%s: %s runs past the end of the message that holds it, at byte offset %d", err, f.where, f.end)
	}
}

// pbJunk returns the byte offset of the first field of the request in b
// (its top level) whose tag has field number 0, which no field has: what
// follows a request's last field when bytes were added after it. ok is
// false when there is none, or the framing breaks before one.
func pbJunk(b []byte) (at int, ok bool) {
	for i := 0; i < len(b); {
		v, m := protowire.ConsumeVarint(b[i:])
		if m < 0 {
			return 0, false
		}
		if v>>3 == 0 {
			return i, true
		}
		num, typ, n := protowire.ConsumeTag(b[i:])
		if n < 0 {
			return 0, false
		}
		l := protowire.ConsumeFieldValue(num, typ, b[i+n:])
		if l < 0 {
			return 0, false
		}
		i += n + l
	}
	return 0, false
}

// pbBreak is where the framing of an OTLP protobuf body breaks: in the
// field where (its tag, length or bytes, with its byte offset), which runs
// past the end of its message, at byte offset end. cut is set when that
// message is the request, which ends where the body does: the body is cut
// short. (A message inside it ends where its holder's length says: one
// of its fields that runs past that end has a wrong length.)
//
// wire is set when the break is a tag of an invalid wire type (6 or 7)
// instead: where is that tag and the field holding it, end its byte
// offset (wireFault).
type pbBreak struct {
	where string
	end   int
	cut   bool
	wire  protowire.Type
}

// wireFault words a break of an invalid wire type, its byte offset
// followed by of (" of the body", or "").
func (f pbBreak) wireFault(of string) string {
	return fmt.Sprintf("invalid wire type %d at byte offset %d%s, in %s", f.wire, f.end, of, f.where)
}

// pbFrame walks the fields of the message of kind k in b[lo:hi], and of
// the messages below it, and returns the first field that runs past the
// end of its message; ok is false when none does, or the first fault met
// is another (a field number 0, a varint too long), except a tag of an
// invalid wire type (6 or 7), which is returned with wire set. Values nest
// no deeper than the depth check let through (protoValueDepth); the walk
// stops 100 levels down all the same.
func pbFrame(b []byte, lo, hi int, k pbKind, depth int) (f pbBreak, ok bool) {
	return pbFrameIn(b, lo, hi, k, depth, "the request")
}

// pbFrameIn is pbFrame, in names the field whose value b[lo:hi] is.
func pbFrameIn(b []byte, lo, hi int, k pbKind, depth int, in string) (f pbBreak, ok bool) {
	short := func(n int) bool { return errors.Is(protowire.ParseError(n), io.ErrUnexpectedEOF) }
	for i := lo; i < hi; {
		num, typ, n := protowire.ConsumeTag(b[i:hi])
		if n < 0 {
			return pbBreak{where: fmt.Sprintf("the tag of the field at byte offset %d", i), end: hi, cut: depth == 0}, short(n)
		}
		if typ == 6 || typ == 7 {
			return pbBreak{where: fmt.Sprintf("the tag of field %d, inside %s", num, in), end: i, wire: typ}, true
		}
		v := i + n
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b[v:hi])
			if m < 0 {
				return pbBreak{where: fmt.Sprintf("the value of field %d at byte offset %d", num, i), end: hi, cut: depth == 0}, short(m)
			}
			i = v + m
			continue
		}
		l, m := protowire.ConsumeVarint(b[v:hi])
		if m < 0 {
			return pbBreak{where: fmt.Sprintf("the length of field %d at byte offset %d", num, i), end: hi, cut: depth == 0}, short(m)
		}
		if left := hi - v - m; l > uint64(left) {
			return pbBreak{where: fmt.Sprintf("field %d at byte offset %d (%d bytes long, %d left)", num, i, l, left), end: hi, cut: depth == 0}, true
		}
		if child, ok := pbChild(k, num); ok && depth < 100 {
			if f, ok := pbFrameIn(b, v+m, v+m+int(l), child, depth+1, fmt.Sprintf("field %d at byte offset %d", num, i)); ok || f.where != "" {
				return f, ok
			}
		}
		i = v + m + int(l)
	}
	return pbBreak{}, false
}
