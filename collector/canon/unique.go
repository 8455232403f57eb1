package canon

import (
	"encoding/binary"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/valyala/fastjson"
)

// ValidOnce reports Valid(v), and that no object of v names a member twice
// (I-JSON, RFC 7493 §2.3). A name given twice has no one reading: the
// readers of JSON disagree on which copy counts (JavaScript, Python and
// Go's encoding/json take the last, the Go ones merging two objects into
// one struct; fastjson's Get takes the first; Go's encoding/json/v2
// refuses the text), so a server may have acted on one copy while a
// reader here took the other. Names are compared as their strings, escapes read: "a"
// and "\u0061" are one name. v must be as Parse left it (see Valid).
// Duplicate names where ValidOnce said no.
func ValidOnce(v *fastjson.Value) bool {
	if !mirrorFits {
		b := v.MarshalTo(nil)
		if Fault(b) != "" {
			return false
		}
		_, _, _, dup := Duplicate(b)
		return !dup
	}
	return validOnce(asMirror(v))
}

func validOnce(m *valueMirror) bool {
	switch m.t {
	case fastjson.TypeObject:
		kvs := m.o.kvs
		escaped := false
		for i := range kvs {
			kv := &kvs[i]
			// Valid's check of a key, which also tells whether it holds an
			// escape, as few do.
			if !m.o.keysUnescaped && special(textOf(kv.k)) {
				if StringFault(textOf(kv.k)) >= 0 {
					return false
				}
				escaped = true
			}
			if !validOnce(asMirror(kv.v)) {
				return false
			}
		}
		switch {
		case len(kvs) < 2:
			return true
		case escaped || len(kvs) > 16:
			return namesSorted(m)
		}
		return namesMarked(kvs)
	case fastjson.TypeArray:
		for _, x := range m.a {
			if !validOnce(asMirror(x)) {
				return false
			}
		}
	case fastjson.TypeNumber:
		return ValidNumber(textOf(m.s))
	case typeRawString:
		return StringFault(textOf(m.s)) < 0
	}
	return true
}

// special reports whether s holds a control byte or a backslash, as
// StringFault's first look does: 8 bytes at a time.
func special(s []byte) bool {
	n := len(s)
	switch {
	case n >= 8:
		for i := 0; i+8 <= n; i += 8 {
			if wordSpecial(binary.LittleEndian.Uint64(s[i:])) {
				return true
			}
		}
		return wordSpecial(binary.LittleEndian.Uint64(s[n-8:]))
	case n >= 4:
		return halfSpecial(binary.LittleEndian.Uint32(s)) || halfSpecial(binary.LittleEndian.Uint32(s[n-4:]))
	}
	for _, c := range s {
		if stringSpecial[c] {
			return true
		}
	}
	return false
}

// namesMarked reports whether no two of kvs, at most 16 names without an
// escape, are one name. Most objects are small and their names differ in
// length or in their first or last byte: a bit per such mark tells them
// apart in one pass; only names whose marks meet are compared, pair by
// pair, which costs less than a sort and allocates nothing.
func namesMarked(kvs []struct {
	k string
	v *fastjson.Value
}) bool {
	var marks uint64
	for i := range kvs {
		k := kvs[i].k
		h := uint(len(k))
		if len(k) > 0 {
			h = h*131 + uint(k[0])*31 + uint(k[len(k)-1])
		}
		bit := uint64(1) << (h & 63)
		if marks&bit != 0 {
			for j := range i {
				if kvs[j].k == k {
					return false
				}
			}
		}
		marks |= bit
	}
	return true
}

// namesSorted reports whether no two members of the object m have one
// name, escapes read: the names sorted and compared with their neighbours.
func namesSorted(m *valueMirror) bool {
	kvs := m.o.kvs
	names := namePool.Get().(*[]string)
	defer namePool.Put(names)
	*names = (*names)[:0]
	for i := range kvs {
		k := kvs[i].k
		if !m.o.keysUnescaped {
			k = unescapeName(k)
		}
		*names = append(*names, k)
	}
	slices.Sort(*names)
	for i := 1; i < len(*names); i++ {
		if (*names)[i] == (*names)[i-1] {
			return false
		}
	}
	return true
}

// namePool holds the names of one large object while ValidOnce sorts them.
var namePool = sync.Pool{New: func() any { s := make([]string, 0, 64); return &s }}

// unescapeName returns the string a key's text (between its quotes, escapes
// as sent) stands for; the text itself when it does not read as one.
func unescapeName(k string) string {
	if strings.IndexByte(k, '\\') < 0 {
		return k
	}
	var s string
	if json.Unmarshal([]byte(`"`+k+`"`), &s) != nil {
		return k
	}
	return s
}

// Duplicate finds the first member of data, JSON text, whose name an
// earlier member of its object already gave (ValidOnce said no for it):
// path names it from the top ("request.params.arguments.path",
// "result.content[0].text"; a name that is not a plain word quoted), and
// first and second are the byte offsets of the two names' opening quotes.
// ok is false when there is none, or when data is not JSON it can follow.
func Duplicate(data []byte) (path string, first, second int, ok bool) {
	d := dupScan{b: data}
	d.value(skipWS(data, 0), 0)
	if !d.found {
		return "", 0, 0, false
	}
	return d.path, d.first, d.second, true
}

// dupScan is Duplicate's walk over the text, with the path to where it is.
type dupScan struct {
	b             []byte
	parts         []string
	found         bool
	path          string
	first, second int
	failed        bool
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// value reads the value at i and returns the index after it; it stops
// (found or failed set) at the first duplicate or at text it cannot read.
func (d *dupScan) value(i, depth int) int {
	if i >= len(d.b) || depth > fastjson.MaxDepth {
		d.failed = true
		return len(d.b)
	}
	switch d.b[i] {
	case '{':
		seen := map[string]int{}
		i = skipWS(d.b, i+1)
		if i < len(d.b) && d.b[i] == '}' {
			return i + 1
		}
		for !d.found && !d.failed {
			if i >= len(d.b) || d.b[i] != '"' {
				d.failed = true
				return len(d.b)
			}
			end := StringEnd(d.b, i)
			name := unescapeName(string(d.b[i+1 : max(i+1, end-1)]))
			if at, dup := seen[name]; dup {
				d.found, d.first, d.second = true, at, i
				d.path = joinPath(append(d.parts, key(name)))
				return len(d.b)
			}
			seen[name] = i
			i = skipWS(d.b, end)
			if i >= len(d.b) || d.b[i] != ':' {
				d.failed = true
				return len(d.b)
			}
			d.parts = append(d.parts, key(name))
			i = d.value(skipWS(d.b, i+1), depth+1)
			d.parts = d.parts[:len(d.parts)-1]
			if d.found || d.failed {
				return len(d.b)
			}
			i = skipWS(d.b, i)
			if i < len(d.b) && d.b[i] == ',' {
				i = skipWS(d.b, i+1)
				continue
			}
			if i < len(d.b) && d.b[i] == '}' {
				return i + 1
			}
			d.failed = true
		}
		return len(d.b)
	case '[':
		i = skipWS(d.b, i+1)
		if i < len(d.b) && d.b[i] == ']' {
			return i + 1
		}
		for n := 0; !d.found && !d.failed; n++ {
			d.parts = append(d.parts, "["+strconv.Itoa(n)+"]")
			i = d.value(i, depth+1)
			d.parts = d.parts[:len(d.parts)-1]
			if d.found || d.failed {
				return len(d.b)
			}
			i = skipWS(d.b, i)
			if i < len(d.b) && d.b[i] == ',' {
				i = skipWS(d.b, i+1)
				continue
			}
			if i < len(d.b) && d.b[i] == ']' {
				return i + 1
			}
			d.failed = true
		}
		return len(d.b)
	}
	return ValueEnd(d.b, i)
}

// key renders one name of a path: as it is when a plain word, else quoted.
func key(name string) string {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '$') {
			return strconv.Quote(name)
		}
	}
	if name == "" {
		return `""`
	}
	return name
}

func joinPath(parts []string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 && p[0] != '[' {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}
