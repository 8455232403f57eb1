package canon

import (
	"encoding/binary"
	"strconv"
)

// fastjson keeps a string's text raw until it is asked for its value and
// takes any byte in it but the closing quote: a control byte (0x00-0x1F,
// a raw newline or NUL), an escape JSON has not (\0, \x41, \'), a \u with
// fewer than 4 hex digits, a backslash before a space. None is JSON
// (RFC 8259 §7), and fastjson's unescaping keeps them as they were sent.
// The tree walk (Valid) checks each string's and each key's raw text with
// StringFault; Fault names the fault and its byte offset.

// StringFault returns the offset in s, the raw text of a JSON string
// between its quotes, of the first byte that makes it no JSON string (a
// control byte, or the backslash of an escape JSON has not), or -1. Most
// strings have neither a control byte nor a backslash: they are read 8
// bytes at a time (4 when shorter than 8), the last word overlapping the
// one before; only from the first word that holds one is s read a byte
// at a time, and no escape starts before that word, none of the words
// before holding a backslash.
func StringFault(s []byte) int {
	n := len(s)
	switch {
	case n >= 8:
		i := 0
		for ; i+8 <= n; i += 8 {
			if wordSpecial(binary.LittleEndian.Uint64(s[i:])) {
				return stringFaultFrom(s, i)
			}
		}
		if i < n && wordSpecial(binary.LittleEndian.Uint64(s[n-8:])) {
			return stringFaultFrom(s, i)
		}
		return -1
	case n >= 4:
		if !halfSpecial(binary.LittleEndian.Uint32(s)) && !halfSpecial(binary.LittleEndian.Uint32(s[n-4:])) {
			return -1
		}
	}
	return stringFaultFrom(s, 0)
}

// stringFaultFrom is StringFault from s[i], where no escape is open: a
// byte at a time in a word with a control byte or a backslash, 8 at a time
// past it.
func stringFaultFrom(s []byte, i int) int {
	for i < len(s) {
		for i+8 <= len(s) && !wordSpecial(binary.LittleEndian.Uint64(s[i:])) {
			i += 8
		}
		for end := min(i+8, len(s)); i < end; i++ {
			c := s[i]
			if !stringSpecial[c] {
				continue
			}
			if c != '\\' {
				return i // < 0x20
			}
			if i+1 == len(s) {
				return i
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+6 > len(s) || !isHex(s[i+2]) || !isHex(s[i+3]) || !isHex(s[i+4]) || !isHex(s[i+5]) {
					return i
				}
				i += 5
			default:
				return i
			}
		}
	}
	return -1
}

// wordSpecial reports whether one of the 8 bytes of x is below 0x20 or a
// backslash: x-0x20 borrows into a byte's top bit only from a byte below
// 0x20 (or from a lower byte that borrowed, itself below 0x20), and x^0x5C
// is 0 only at a backslash (Hacker's Delight 6-1; no false hit when the
// word has no such byte).
func wordSpecial(x uint64) bool {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	y := x ^ (ones * '\\')
	return ((x-ones*0x20)&^x|(y-ones)&^y)&tops != 0
}

// halfSpecial is wordSpecial for 4 bytes.
func halfSpecial(x uint32) bool {
	const ones, tops = 0x01010101, 0x80808080
	y := x ^ (ones * '\\')
	return ((x-ones*0x20)&^x|(y-ones)&^y)&tops != 0
}

// stringSpecial marks the bytes of a string's text StringFault stops at:
// the control bytes and the backslash.
var stringSpecial = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['\\'] = true
	return t
}()

func isHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// stringReason says why the string text s is no JSON string at at, where
// StringFault stopped.
func stringReason(s []byte, at int) string {
	c := s[at]
	if c != '\\' {
		return "a control byte 0x" + hex2(c) + " inside a string"
	}
	if at+1 == len(s) {
		return "a lone backslash at the end of a string"
	}
	e := s[at+1]
	switch {
	case e == 'u':
		// Show the \u and what follows it, up to 4 bytes, as far as they
		// print.
		j := at + 2
		for j < len(s) && j < at+6 && s[j] > 0x20 && s[j] < 0x7f && s[j] != '\\' {
			j++
		}
		return `invalid escape ` + string(s[at:j]) + ` (\u takes 4 hex digits)`
	case e > 0x20 && e < 0x7f:
		return `invalid escape \` + string(e)
	}
	return "invalid escape: a backslash before byte 0x" + hex2(e)
}

func hex2(c byte) string {
	const digits = "0123456789ABCDEF"
	return string([]byte{digits[c>>4], digits[c&15]})
}

// BadString returns the byte offset in data and the reason of the first
// fault of a string or key of data (StringFault), or -1 and "". data is
// text fastjson has parsed: every quote outside a string starts one.
func BadString(data []byte) (at int, reason string) {
	for i := 0; i < len(data); {
		if data[i] != '"' {
			i++
			continue
		}
		end := StringEnd(data, i)
		s := data[i+1 : end]
		if end > i+1 && data[end-1] == '"' {
			s = data[i+1 : end-1]
		}
		if j := StringFault(s); j >= 0 {
			return i + 1 + j, stringReason(s, j)
		}
		i = end
	}
	return -1, ""
}

// Fault names the first token of data, a number or a string, that is not
// JSON, as `NaN is not a JSON number at byte offset 17` or `invalid escape
// \x at byte offset 9`, or "" when there is none. It is the reason to give
// once Valid has said no.
func Fault(data []byte) string {
	nat, tok := BadNumber(data)
	sat, reason := BadString(data)
	switch {
	case nat < 0 && sat < 0:
		return ""
	case sat < 0 || nat >= 0 && nat < sat:
		return numberReason(tok) + " at byte offset " + strconv.Itoa(nat)
	}
	return reason + " at byte offset " + strconv.Itoa(sat)
}
