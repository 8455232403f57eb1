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
		kend := StringEnd(obj, i)
		if kend >= len(obj) || obj[kend] != ':' {
			return -1
		}
		key := obj[i+1 : kend-1]
		start := kend + 1
		end := ValueEnd(obj, start)
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
