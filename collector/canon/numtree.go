package canon

import (
	"unsafe"

	"github.com/valyala/fastjson"
)

// Valid reports whether v, a value fastjson parsed, is JSON: every number
// a JSON number (ValidNumber) and every string and object key a JSON
// string (StringFault), fastjson taking both loosely. It walks the parsed
// tree and reads the text fastjson cut out for each number, string and
// key, and no byte between them, where BadNumber and BadString read every
// byte again (docs/benchmarks.md). fastjson's public accessors cannot
// serve: Type unescapes a string in the parser's buffer as it answers, and
// the others allocate an error for a value of another type. The walk reads
// fastjson's fields through a mirror of its Value; if the mirror does not
// fit the fastjson built in (checked once, at start), Valid reads v's text
// again with Fault instead. v must be as Parse left it: Type, Get, Visit
// and the string accessors unescape strings and keys in place, after which
// their raw text is gone and a \n of it reads as a control byte. Fault
// names what Valid found.
func Valid(v *fastjson.Value) bool {
	if !mirrorFits {
		var buf []byte
		return Fault(v.MarshalTo(buf)) == ""
	}
	return valid(asMirror(v))
}

// typeRawString is fastjson's type of a string not yet unescaped: its s is
// the text between the quotes as sent.
const typeRawString fastjson.Type = 7

func valid(m *valueMirror) bool {
	switch m.t {
	case fastjson.TypeObject:
		for i := range m.o.kvs {
			kv := &m.o.kvs[i]
			if !m.o.keysUnescaped && StringFault(textOf(kv.k)) >= 0 {
				return false
			}
			if !valid(asMirror(kv.v)) {
				return false
			}
		}
	case fastjson.TypeArray:
		for _, x := range m.a {
			if !valid(asMirror(x)) {
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

func textOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// valueMirror is fastjson.Value's layout (v1.6.10: parser.go, Value,
// Object and kv), read only.
type valueMirror struct {
	o struct {
		kvs []struct {
			k string
			v *fastjson.Value
		}
		keysUnescaped bool
	}
	a []*fastjson.Value
	s string
	t fastjson.Type
}

func asMirror(v *fastjson.Value) *valueMirror { return (*valueMirror)(unsafe.Pointer(v)) }

// mirrorFits says whether valueMirror reads fastjson.Value as it is: the
// same size, and a parsed sample of every kind read through it as the
// public accessors read it.
var mirrorFits = func() bool {
	if unsafe.Sizeof(fastjson.Value{}) != unsafe.Sizeof(valueMirror{}) {
		return false
	}
	var p fastjson.Parser
	v, err := p.Parse(`{"a":[1.5,"x",true,null,{"b":-2}],"c":false}`)
	if err != nil {
		return false
	}
	m := asMirror(v)
	if m.t != fastjson.TypeObject || len(m.o.kvs) != 2 || m.o.kvs[0].k != "a" || m.o.kvs[1].k != "c" || m.o.kvs[0].v != v.Get("a") {
		return false
	}
	a := asMirror(m.o.kvs[0].v)
	if a.t != fastjson.TypeArray || len(a.a) != 5 || a.a[4] != v.Get("a", "4") {
		return false
	}
	n, o := asMirror(a.a[0]), asMirror(a.a[4])
	if n.t != fastjson.TypeNumber || n.s != "1.5" || asMirror(a.a[2]).t != fastjson.TypeTrue || asMirror(a.a[3]).t != fastjson.TypeNull ||
		o.t != fastjson.TypeObject || len(o.o.kvs) != 1 || asMirror(o.o.kvs[0].v).t != fastjson.TypeNumber || asMirror(o.o.kvs[0].v).s != "-2" ||
		asMirror(m.o.kvs[1].v).t != fastjson.TypeFalse {
		return false
	}
	// Strings last: Type unescapes them in place (none here needs it).
	if asMirror(a.a[1]).t != typeRawString || asMirror(a.a[1]).s != "x" || a.a[1].Type() != fastjson.TypeString || m.o.keysUnescaped {
		return false
	}
	// A key not found unescapes the keys.
	return v.Get("z") == nil && m.o.keysUnescaped
}()
