package canon

import (
	"strconv"
	"strings"
)

// fastjson takes as a number any run of digits, '.', '+', '-', 'e' and
// 'E' ("1.2.3", "+01", "1e", "-") and NaN and Inf in any case ("nan",
// "-inf"), none of which is JSON (RFC 8259 §6): Python's json.dumps writes
// NaN and Infinity by default. A value parsed as the contract's JSON is
// checked with Valid once fastjson has taken it; Fault names the fault in
// its text.

// ValidNumber reports whether b is a JSON number: -?(0|[1-9][0-9]*)
// (\.[0-9]+)?([eE][+-]?[0-9]+)?.
func ValidNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i == len(b) || !isDigit(b[i]) {
			return false
		}
		for ; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i == len(b) || !isDigit(b[i]) {
			return false
		}
		for ; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	return i == len(b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// BadNumber returns the byte offset and the text of the first token of
// data that reads as a number (it starts with a digit, a sign or a point,
// or is NaN or Inf) but is not a JSON number, or -1. It reads data once,
// without a tree or an allocation: strings are skipped as StringEnd finds
// their end (a search for the quote in long ones), and the bytes between
// them are tokens and structure. On text fastjson has parsed, BadNumber
// finds a number exactly where Valid's walk finds one that is not JSON
// (FuzzBadNumber holds both to encoding/json's Valid); on other text it
// names a number that may be why the parser failed.
func BadNumber(data []byte) (at int, token []byte) {
	for i := 0; i < len(data); {
		c := data[i]
		if c == '"' {
			i = StringEnd(data, i)
			continue
		}
		if tokenEnd[c] {
			i++
			continue
		}
		j := i
		for j < len(data) && !tokenEnd[data[j]] {
			j++
		}
		if t := data[i:j]; numberLike(t) && !ValidNumber(t) {
			return i, t
		}
		i = j
	}
	return -1, nil
}

// tokenEnd marks the bytes a number or a literal ends at.
var tokenEnd = byteSet(",:{}[]\" \n\t\r")

// numberLike reports whether the token t is meant as a number.
func numberLike(t []byte) bool {
	switch t[0] {
	case '-', '+', '.', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	case 'e', 'E':
		// fastjson takes "e" and "E+1" as numbers.
		for _, c := range t {
			if !isDigit(c) && c != '.' && c != '+' && c != '-' && c != 'e' && c != 'E' {
				return false
			}
		}
		return true
	}
	return len(t) >= 3 && (strings.EqualFold(string(t[:3]), "nan") || strings.EqualFold(string(t[:3]), "inf"))
}

// numberReason says the token t is no JSON number, quoting it when it is
// long or holds more than number bytes.
func numberReason(t []byte) string {
	const max = 24
	s := string(t)
	plainToken := len(s) <= max
	for i := 0; plainToken && i < len(s); i++ {
		c := s[i]
		plainToken = isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '+' || c == '-'
	}
	if !plainToken {
		if len(s) > max {
			s = s[:max] + "..."
		}
		s = strconv.Quote(s)
	}
	return s + " is not a JSON number"
}
