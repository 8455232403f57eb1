package canon

// Members finds the members named keys in obj, the canonical JSON of an
// object (Append's output, or text Canonical accepts): vals[i] is set to
// the text of the value of keys[i], which is Append of that value, or nil
// when obj has no such member. It returns how many members obj has, or -1
// when obj is not such an object. Keys must need no escaping.
func Members(obj []byte, keys []string, vals [][]byte) int {
	clear(vals)
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return -1
	}
	if len(obj) == 2 {
		return 0
	}
	n := 0
	for i := 1; ; {
		if obj[i] != '"' {
			return -1
		}
		kend := stringEnd(obj, i)
		if kend < 0 || kend >= len(obj) || obj[kend] != ':' {
			return -1
		}
		key := obj[i+1 : kend-1]
		start := kend + 1
		end := valueEnd(obj, start)
		if end <= start || end >= len(obj) {
			return -1
		}
		for j, k := range keys {
			if string(key) == k {
				vals[j] = obj[start:end]
			}
		}
		n++
		switch obj[end] {
		case ',':
			i = end + 1
		case '}':
			if end != len(obj)-1 {
				return -1
			}
			return n
		default:
			return -1
		}
	}
}

// stringEnd returns the index after the string whose opening quote is at
// i, or -1 when it does not close.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '"':
			return j + 1
		case '\\':
			j++
		}
	}
	return -1
}

// valueEnd returns the index after the compact JSON value at i, or -1
// when it does not end within b.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); {
			switch b[j] {
			case '"':
				if j = stringEnd(b, j); j < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
			j++
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
		j++
	}
	return j
}
