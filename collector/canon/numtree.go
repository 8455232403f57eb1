package canon

import (
	"unsafe"

	"github.com/valyala/fastjson"
)

// NumbersValid reports whether every number of v, a value fastjson
// parsed, is a JSON number (ValidNumber). It walks the parsed tree and
// reads the text fastjson cut out for each number: no byte of the input is
// read again, where BadNumber reads them all (a tenth of analyze's time per
// call, measured in docs/benchmarks.md). fastjson's public accessors cannot
// serve: Type unescapes a string in the parser's buffer as it answers, and
// the others allocate an error for a value of another type. The walk reads
// fastjson's fields through a mirror of its Value; if the mirror does not
// fit the fastjson built in (checked once, at start), NumbersValid reads
// v's text again with BadNumber instead.
func NumbersValid(v *fastjson.Value) bool {
	if !mirrorFits {
		var buf []byte
		at, _ := BadNumber(v.MarshalTo(buf))
		return at < 0
	}
	return numbersValid(asMirror(v))
}

func numbersValid(m *valueMirror) bool {
	switch m.t {
	case fastjson.TypeObject:
		for i := range m.o.kvs {
			if !numbersValid(asMirror(m.o.kvs[i].v)) {
				return false
			}
		}
	case fastjson.TypeArray:
		for _, x := range m.a {
			if !numbersValid(asMirror(x)) {
				return false
			}
		}
	case fastjson.TypeNumber:
		return ValidNumber(unsafe.Slice(unsafe.StringData(m.s), len(m.s)))
	}
	return true
}

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
	return asMirror(a.a[1]).s == "x" && a.a[1].Type() == fastjson.TypeString
}()
