package receiver

import (
	"errors"
	"fmt"

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
		return fmt.Errorf("an attribute value nests more than %d arrays or key-value lists (serve.receiver.max_depth)", limit)
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
