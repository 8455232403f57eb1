package canon

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/valyala/fastjson"
)

// ParseError rewrites err, fastjson's error for data, as one reason and
// the byte offset of data it failed at, keeping the unparsed tail it
// quotes. fastjson wraps its reason once for every level it was inside
// ("cannot parse object: cannot parse object value: cannot parse array:
// ..."): 14 kB of links for a value nested past its depth limit, and no
// offset. A reason it gives without an offset, and an offset it cannot
// tell, are left out. A number that is not JSON at or before where it
// failed is named instead (BadNumber), as "0x10 is not a JSON number", and
// so is a string that is not JSON before it (BadString).
func ParseError(data []byte, err error) string {
	msg := err.Error()
	tail := ""
	if i := strings.Index(msg, "; unparsed tail: "); i >= 0 {
		msg, tail = msg[:i], msg[i:]
	}
	msg = strings.TrimPrefix(msg, "cannot parse JSON: ")
	for {
		i := strings.Index(msg, ": ")
		if i < 0 || !wrapLink(msg[:i]) {
			break
		}
		msg = msg[i+2:]
	}
	at := -1
	if strings.HasPrefix(msg, "too big depth") {
		msg = "nested deeper than " + strconv.Itoa(fastjson.MaxDepth) + " levels"
		at = tooDeepAt(data, fastjson.MaxDepth)
	} else if t, uerr := strconv.Unquote(strings.TrimPrefix(tail, "; unparsed tail: ")); tail != "" && uerr == nil && len(t) <= 80 && len(t) <= len(data) {
		// Not cut short (fastjson quotes 40 bytes of each end of a
		// longer one): the tail is the rest of data from where it failed.
		at = len(data) - len(t)
	} else {
		var se *json.SyntaxError
		if errors.As(json.Unmarshal(data, new(json.RawMessage)), &se) {
			// Offset counts the bytes read, the bad one among them.
			at = int(se.Offset)
			if strings.HasPrefix(se.Error(), "invalid character") {
				at--
			}
		}
	}
	if nat, t := BadNumber(data); nat >= 0 && (at < 0 || nat <= at) && !strings.HasPrefix(msg, "nested deeper") {
		// fastjson stops inside a number it cannot read ("-Infinity" after
		// "-Inf", "0x10" after "0"), or past one it took ("1.2.3"): the
		// number is the fault to name.
		msg, at = numberReason(t), nat
	}
	if sat, reason := BadString(data); sat >= 0 && at >= 0 && sat < at && !strings.HasPrefix(msg, "nested deeper") {
		// A string fastjson read past that is not JSON (a control byte, \x)
		// comes before where it failed: it is the first fault.
		msg, at = reason, sat
	}
	if at >= 0 {
		msg += " at byte offset " + strconv.Itoa(at)
	}
	return msg + tail
}

// wrapLink reports whether s is one of the links fastjson wraps an inner
// error in as it returns from a nested object or array.
func wrapLink(s string) bool {
	switch s {
	case "cannot parse object", "cannot parse object value", "cannot parse array", "cannot parse array value":
		return true
	}
	return false
}

// tooDeepAt returns the offset of the first value of b that starts inside
// max objects or arrays, where fastjson stops, or -1. Object keys are not
// values.
func tooDeepAt(b []byte, max int) int {
	var inObject []bool // per open container: whether it is an object
	wantKey := false    // the next string is an object's key
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch c {
		case ' ', '\t', '\n', '\r', ':':
			continue
		case ',':
			wantKey = len(inObject) > 0 && inObject[len(inObject)-1]
			continue
		case ']', '}':
			if len(inObject) > 0 {
				inObject = inObject[:len(inObject)-1]
			}
			continue
		}
		if c == '"' && wantKey {
			wantKey = false
			i = StringEnd(b, i) - 1
			continue
		}
		if len(inObject) >= max {
			return i
		}
		switch c {
		case '{':
			inObject = append(inObject, true)
			wantKey = true
		case '[':
			inObject = append(inObject, false)
		case '"':
			i = StringEnd(b, i) - 1
		default:
			for i+1 < len(b) && !strings.ContainsRune(" \t\n\r,]}:", rune(b[i+1])) {
				i++
			}
		}
	}
	return -1
}
