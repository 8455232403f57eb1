package canon

import (
	"hash/maphash"
	"strings"
	"sync"

	"github.com/valyala/fastjson"
)

// sumSeed seeds Sum: sums compare within one process, never stored.
var sumSeed = maphash.MakeSeed()

// Tags of the kinds of value Sum tells apart.
const (
	sumObject uint64 = iota + 1
	sumArray
	sumString
	sumNumber
	sumTrue
	sumFalse
	sumNull
)

// Sum returns a 64-bit hash of the JSON value v, the same for any two
// texts of one value: white space, the order of an object's members and
// the escapes of a string do not change it (numbers are taken as written:
// 1 and 1.0 differ). It tells apart two responses observed under one call
// id without the canonical text of either, which would cost a copy per
// call. 0 for nil. Like Type and Visit, it may unescape strings and keys
// of v in place.
func Sum(v *fastjson.Value) uint64 {
	if v == nil {
		return 0
	}
	if !mirrorFits {
		buf := numBufs.Get().(*[]byte)
		h := sumPublic(v, buf) | 1
		numBufs.Put(buf)
		return h
	}
	return sum(v) | 1
}

// sum is Sum's walk. It reads fastjson's fields through the mirror Valid
// reads (numtree.go), so that no string or key without an escape is
// unescaped, no number copied and no closure called per member: a raw
// text without a backslash is its own unescaped text. A text with one is
// unescaped in place by fastjson's own accessors first, as sumPublic's
// were, so both hash the same bytes.
func sum(v *fastjson.Value) uint64 {
	m := asMirror(v)
	switch m.t {
	case fastjson.TypeObject:
		if !m.o.keysUnescaped && keyEscaped(m) {
			// Visit unescapes every key first.
			o, _ := v.Object()
			o.Visit(func([]byte, *fastjson.Value) {})
		}
		// Members are summed, so that their order does not count.
		var acc uint64
		for i := range m.o.kvs {
			kv := &m.o.kvs[i]
			acc += mix(maphash.String(sumSeed, kv.k), sum(kv.v))
		}
		return mix(sumObject, acc)
	case fastjson.TypeArray:
		acc := sumArray
		for _, x := range m.a {
			acc = mix(acc, sum(x))
		}
		return acc
	case typeRawString:
		if strings.IndexByte(m.s, '\\') >= 0 {
			v.Type() // unescapes m.s in place
		}
		return mix(sumString, maphash.String(sumSeed, m.s))
	case fastjson.TypeString:
		return mix(sumString, maphash.String(sumSeed, m.s))
	case fastjson.TypeNumber:
		// A number's text is what MarshalTo writes of it.
		return mix(sumNumber, maphash.String(sumSeed, m.s))
	case fastjson.TypeTrue:
		return sumTrue
	case fastjson.TypeFalse:
		return sumFalse
	}
	return sumNull
}

// keyEscaped reports whether a key of the object m holds an escape.
func keyEscaped(m *valueMirror) bool {
	for i := range m.o.kvs {
		if strings.IndexByte(m.o.kvs[i].k, '\\') >= 0 {
			return true
		}
	}
	return false
}

// numBufs hold the text of a number while sumPublic hashes it: a buffer of
// the stack would move to the heap at each number (MarshalTo keeps it).
var numBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64); return &b }}

// sumPublic is sum through fastjson's public accessors, for a fastjson
// whose layout the mirror does not fit.
func sumPublic(v *fastjson.Value, buf *[]byte) uint64 {
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		// Members are summed, so that their order does not count.
		var acc uint64
		o.Visit(func(k []byte, x *fastjson.Value) {
			acc += mix(maphash.Bytes(sumSeed, k), sumPublic(x, buf))
		})
		return mix(sumObject, acc)
	case fastjson.TypeArray:
		a, _ := v.Array()
		acc := sumArray
		for _, x := range a {
			acc = mix(acc, sumPublic(x, buf))
		}
		return acc
	case fastjson.TypeString:
		return mix(sumString, maphash.Bytes(sumSeed, v.GetStringBytes()))
	case fastjson.TypeNumber:
		*buf = v.MarshalTo((*buf)[:0])
		return mix(sumNumber, maphash.Bytes(sumSeed, *buf))
	case fastjson.TypeTrue:
		return sumTrue
	case fastjson.TypeFalse:
		return sumFalse
	}
	return sumNull
}

// mix combines a and b into one well-spread value (SplitMix64's finalizer
// over a and an odd multiple of b), order-sensitive.
func mix(a, b uint64) uint64 {
	z := a ^ (b * 0x9e3779b97f4a7c15)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
