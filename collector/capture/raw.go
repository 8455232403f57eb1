package capture

import "bytes"

// fastjson keeps no byte offsets, so re-serializing a parsed value was the
// only way to get the text of arguments and results, and it cost more than
// the parse itself. rawMember finds the text of one member in a record that
// fastjson has already accepted, so that it can be copied as sent.
//
// The scan is shallow and trusts its input: it only skips over values, and
// never reads past the end of data even when the input is not JSON.

// rawMembers sets vals[i] to the text of the value of member keys[i] of the
// JSON object obj, with no surrounding white space, or to nil when obj is
// not an object or has no such member. The first member of a name wins, as
// with fastjson's Get. ok is false when an object key met before all were
// found is written with escapes: fastjson compares keys unescaped, so such a
// key may spell one of keys, and the caller must fall back on the parsed
// tree.
func rawMembers(obj []byte, keys []string, vals [][]byte) (ok bool) {
	clear(vals)
	left := len(keys)
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return true
	}
	i++
	for left > 0 {
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return true // '}' or the end
		}
		end := stringEnd(obj, i)
		k := obj[i+1 : max(end-1, i+1)]
		if bytes.IndexByte(k, '\\') >= 0 {
			return false
		}
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return true
		}
		start := skipSpace(obj, i+1)
		i = valueEnd(obj, start)
		for n, key := range keys {
			if vals[n] == nil && string(k) == key {
				vals[n] = obj[start:i]
				left--
				break
			}
		}
		i = skipSpace(obj, i)
		if i < len(obj) && obj[i] == ',' {
			i++
		}
	}
	return true
}

// rawMember is rawMembers for one key.
func rawMember(obj []byte, key string) (val []byte, ok bool) {
	var v [1][]byte
	ok = rawMembers(obj, []string{key}, v[:])
	return v[0], ok
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index after the string whose opening quote is at i.
func stringEnd(b []byte, i int) int {
	j := i + 1
	for {
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			return len(b)
		}
		q += j
		// The quote ends the string unless an odd run of backslashes
		// escapes it.
		n := 0
		for k := q - 1; k > i && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

// valueEnd returns the index after the value that starts at i.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = stringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	// A number or a literal (true, false, null, and the NaN and Inf that
	// fastjson accepts) ends at a delimiter.
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\n', '\t', '\r':
			return i
		}
		i++
	}
	return len(b)
}
