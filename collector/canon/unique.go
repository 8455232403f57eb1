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
// (I-JSON, RFC 7493 §2.3). A name given twice has no one reading unless
// one is chosen: JavaScript, Python and Go's encoding/json (the MCP
// SDKs) take the last copy, fastjson's Get the first, and Append the last;
// KeepLast makes a text that every reader reads alike. Names are compared
// as their strings, escapes read: "a" and "\u0061" are one name. v must be
// as Parse left it (see Valid). Taken from strict49 (2d4641a), which
// refused such text; here the text is kept (KeepLast).
func ValidOnce(v *fastjson.Value) bool {
	if !mirrorFits {
		b := v.MarshalTo(nil)
		if Fault(b) != "" {
			return false
		}
		return len(KeepLast(b, nil, 1)) == 0
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
		return true
	}
	// A number, a string or a literal: Valid's check.
	return valid(m)
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

// Repeat is a name that an object of a JSON text gives twice.
type Repeat struct {
	// Path names the member from the top ("request.params.arguments.path",
	// "result.content[0].text"; a name that is not a plain word quoted).
	Path string
	// First and Second are the byte offsets of the opening quotes of the
	// earlier copy's name, blanked by KeepLast, and of the later one's.
	First, Second int
}

// KeepLast overwrites with spaces, in b, JSON text that fastjson accepts,
// every member whose name a later member of its object gives again, with
// the comma after it: every reader of the text then reads the last copy of
// each name, as JavaScript, Python and Go's encoding/json read b (the MCP
// SDKs), and as Append renders b. Nothing moves: an offset in b stays an
// offset in the text read. It appends to reps the names given twice, at
// most max of them (all are blanked), and returns reps; none when b names
// no member twice, which it then leaves as it was.
func KeepLast(b []byte, reps []Repeat, max int) []Repeat {
	k := keepLast{b: b, reps: reps, max: max}
	k.value(skipWS(b, 0), 0)
	return k.reps
}

// keepLast is KeepLast's walk over the text, with the path to where it is.
type keepLast struct {
	b     []byte
	parts []string
	reps  []Repeat
	max   int
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// value reads the value at i and returns the index after it. Text it
// cannot follow (which fastjson would not have taken) ends the walk.
func (k *keepLast) value(i, depth int) int {
	if i >= len(k.b) || depth > fastjson.MaxDepth {
		return len(k.b)
	}
	switch k.b[i] {
	case '{':
		// members holds where each member starts and where the member
		// after it starts (its comma included); seen, by name, the latest
		// copy's index in members. KeepLast runs on the few texts that
		// name a member twice: what they cost is not saved.
		type member struct{ start, next int }
		var members []member
		seen := map[string]int{}
		i = skipWS(k.b, i+1)
		if i < len(k.b) && k.b[i] == '}' {
			return i + 1
		}
		for {
			if i >= len(k.b) || k.b[i] != '"' {
				return len(k.b)
			}
			start := i
			if len(members) > 0 {
				members[len(members)-1].next = start
			}
			end := StringEnd(k.b, i)
			name := unescapeName(string(k.b[i+1 : max(i+1, end-1)]))
			i = skipWS(k.b, end)
			if i >= len(k.b) || k.b[i] != ':' {
				return len(k.b)
			}
			k.parts = append(k.parts, key(name))
			i = k.value(skipWS(k.b, i+1), depth+1)
			if at, dup := seen[name]; dup {
				m := members[at]
				if len(k.reps) < k.max {
					k.reps = append(k.reps, Repeat{Path: joinPath(k.parts), First: m.start, Second: start})
				}
				for j := m.start; j < m.next; j++ {
					k.b[j] = ' '
				}
			}
			k.parts = k.parts[:len(k.parts)-1]
			seen[name] = len(members)
			members = append(members, member{start: start})
			i = skipWS(k.b, i)
			if i < len(k.b) && k.b[i] == ',' {
				i = skipWS(k.b, i+1)
				continue
			}
			if i < len(k.b) && k.b[i] == '}' {
				return i + 1
			}
			return len(k.b)
		}
	case '[':
		i = skipWS(k.b, i+1)
		if i < len(k.b) && k.b[i] == ']' {
			return i + 1
		}
		for n := 0; ; n++ {
			k.parts = append(k.parts, "["+strconv.Itoa(n)+"]")
			i = k.value(i, depth+1)
			k.parts = k.parts[:len(k.parts)-1]
			i = skipWS(k.b, i)
			if i < len(k.b) && k.b[i] == ',' {
				i = skipWS(k.b, i+1)
				continue
			}
			if i < len(k.b) && k.b[i] == ']' {
				return i + 1
			}
			return len(k.b)
		}
	}
	return ValueEnd(k.b, i)
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
