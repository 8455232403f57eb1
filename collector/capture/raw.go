package capture

import (
	"bytes"

	"github.com/mcpaudit/mcpaudit/collector/canon"
)

// fastjson keeps no byte offsets, so re-serializing a parsed value was the
// only way to get the text of arguments and results, and it cost more than
// the parse itself. rawMember finds the text of one member in a record that
// fastjson has already accepted, so that it can be copied as sent.
//
// The scan is shallow and trusts its input: it only skips over values, and
// never reads past the end of data even when the input is not JSON.

// member names a member of a JSON object to find: its value's text is
// kept, or, with sub, members of its value are found in turn. One scan
// finds them all, reading each byte of the record once.
type member struct {
	key   string
	sub   []member
	val   []byte // the text found, with no surrounding white space
	found bool
}

// findMembers finds wants in the JSON object that starts at b[i] and
// returns the index after it. The first member of a name wins, as with
// fastjson's Get. ok is false when an object key met while some of wants
// were still missing is written with escapes: fastjson compares keys
// unescaped, so such a key may spell a wanted one, and the caller must fall
// back on the parsed tree.
func findMembers(b []byte, i int, wants []member) (end int, ok bool) {
	if i >= len(b) || b[i] != '{' {
		return canon.ValueEnd(b, i), true
	}
	left := len(wants)
	i++
	for {
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != '"' {
			return min(i+1, len(b)), true // after '}', or the end
		}
		kend := canon.StringEnd(b, i)
		k := b[i+1 : max(kend-1, i+1)]
		if left > 0 && bytes.IndexByte(k, '\\') >= 0 {
			return len(b), false
		}
		i = skipSpace(b, kend)
		if i >= len(b) || b[i] != ':' {
			return len(b), true
		}
		start := skipSpace(b, i+1)
		var w *member
		if left > 0 {
			for n := range wants {
				if !wants[n].found && string(k) == wants[n].key {
					w = &wants[n]
					break
				}
			}
		}
		switch {
		case w == nil:
			i = canon.ValueEnd(b, start)
		case w.sub != nil:
			if i, ok = findMembers(b, start, w.sub); !ok {
				return len(b), false
			}
		default:
			i = canon.ValueEnd(b, start)
		}
		if w != nil {
			w.val, w.found = b[start:i], true
			left--
		}
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i++
		}
	}
}

// findPath returns the text of the value at path, a key in each object on
// the way, in the JSON object that starts at b[i]: the first member of a
// name, as with fastjson's Get; nil when there is none. It stops there,
// reading no further. ok is as for findMembers.
func findPath(b []byte, i int, path ...string) (val []byte, ok bool) {
	start, found := findPathStart(b, i, path...)
	if !found {
		return nil, start >= 0
	}
	return b[start:canon.ValueEnd(b, start)], true
}

// findPathStart is findPath that returns where the value starts, with
// found set, instead of its text; start is -1 when findPath's ok would be
// false, 0 when there is no such value.
func findPathStart(b []byte, i int, path ...string) (start int, found bool) {
	for depth, key := range path {
		if i >= len(b) || b[i] != '{' {
			return 0, false
		}
		i++
		for {
			i = skipSpace(b, i)
			if i >= len(b) || b[i] != '"' {
				return 0, false // after '}', or the end
			}
			kend := canon.StringEnd(b, i)
			k := b[i+1 : max(kend-1, i+1)]
			if bytes.IndexByte(k, '\\') >= 0 {
				return -1, false
			}
			i = skipSpace(b, kend)
			if i >= len(b) || b[i] != ':' {
				return 0, false
			}
			start := skipSpace(b, i+1)
			if string(k) == key {
				if depth == len(path)-1 {
					return start, true
				}
				i = start
				break
			}
			i = skipSpace(b, canon.ValueEnd(b, start))
			if i < len(b) && b[i] == ',' {
				i++
			}
		}
	}
	return 0, false
}

// rawMember returns the text of the value of key in the JSON object obj,
// or nil when there is none; ok is as for findMembers.
func rawMember(obj []byte, key string) (val []byte, ok bool) {
	w := [1]member{{key: key}}
	_, ok = findMembers(obj, skipSpace(obj, 0), w[:])
	return w[0].val, ok
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// Byte classes for the scans: tables cost one load per byte where a switch
// costs several branches.
var (
	structural = byteSet(`"{}[]`)
	delimiter  = byteSet(",}] \n\t\r")
)

func byteSet(s string) (t [256]bool) {
	for i := 0; i < len(s); i++ {
		t[s[i]] = true
	}
	return t
}
