package canon

import "bytes"

// StringEnd returns the index after the JSON string whose opening quote is
// at i, or len(b) when it does not close.
func StringEnd(b []byte, i int) int {
	j := i + 1
	// Most strings are short: a byte loop ends them sooner than a call.
	for n := min(len(b), j+16); j < n; j++ {
		switch b[j] {
		case '"':
			return j + 1
		case '\\':
			j++
		}
	}
	// Long ones (run code, texts) are searched for their quote with
	// bytes.IndexByte, a quote being theirs unless backslashes escape it.
	for j < len(b) {
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			return len(b)
		}
		q += j
		n := 0
		for k := q - 1; k > i && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return len(b)
}

// ValueEnd returns the index after the JSON value that starts at i, or
// len(b) when it does not end within b. It finds the end only: the value
// is not checked.
func ValueEnd(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			for i < len(b) && !structural[b[i]] {
				i++
			}
			if i == len(b) {
				break
			}
			switch b[i] {
			case '"':
				i = StringEnd(b, i)
				continue
			case '{', '[':
				depth++
			default: // '}', ']'
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
	for i < len(b) && !delimiter[b[i]] {
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
