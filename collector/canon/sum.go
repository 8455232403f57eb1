package canon

import (
	"hash/maphash"
	"strings"
	"sync"
	"unsafe"

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
// call. 0 for nil.
func Sum(v *fastjson.Value) uint64 {
	if v == nil {
		return 0
	}
	if mirrorFits {
		return sumMirror(asMirror(v)) | 1
	}
	return sumPublic(v) | 1
}

// sumPublic is sum, with a buffer of numBufs.
func sumPublic(v *fastjson.Value) uint64 {
	buf := numBufs.Get().(*[]byte)
	h := sum(v, buf)
	numBufs.Put(buf)
	return h
}

// sumMirror is sum read through the mirror of fastjson's Value, as Valid
// reads it: without a closure a member, a method call a value, and the
// unescaping pass Type makes over every string. Text that holds no escape
// is its own value, and is hashed as it is; a string or an object's keys
// with one are read through fastjson (sum), which unescapes them as sum
// always did. It returns what sum returns.
func sumMirror(m *valueMirror) uint64 {
	switch m.t {
	case fastjson.TypeObject:
		if !m.o.keysUnescaped {
			for i := range m.o.kvs {
				if strings.IndexByte(m.o.kvs[i].k, '\\') >= 0 {
					return sumPublic((*fastjson.Value)(unsafe.Pointer(m)))
				}
			}
		}
		var acc uint64
		for i := range m.o.kvs {
			kv := &m.o.kvs[i]
			acc += mix(maphash.String(sumSeed, kv.k), sumMirror(asMirror(kv.v)))
		}
		return mix(sumObject, acc)
	case fastjson.TypeArray:
		acc := sumArray
		for _, x := range m.a {
			acc = mix(acc, sumMirror(asMirror(x)))
		}
		return acc
	case typeRawString:
		if strings.IndexByte(m.s, '\\') >= 0 {
			return sumPublic((*fastjson.Value)(unsafe.Pointer(m)))
		}
		return mix(sumString, maphash.String(sumSeed, m.s))
	case fastjson.TypeString:
		return mix(sumString, maphash.String(sumSeed, m.s))
	case fastjson.TypeNumber:
		return mix(sumNumber, maphash.String(sumSeed, m.s))
	case fastjson.TypeTrue:
		return sumTrue
	case fastjson.TypeFalse:
		return sumFalse
	}
	return sumNull
}

// numBufs hold the text of a number while it is hashed: a buffer of the
// stack would move to the heap at each number (MarshalTo keeps it).
var numBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64); return &b }}

func sum(v *fastjson.Value, buf *[]byte) uint64 {
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		// Members are summed, so that their order does not count.
		var acc uint64
		o.Visit(func(k []byte, x *fastjson.Value) {
			acc += mix(maphash.Bytes(sumSeed, k), sum(x, buf))
		})
		return mix(sumObject, acc)
	case fastjson.TypeArray:
		a, _ := v.Array()
		acc := sumArray
		for _, x := range a {
			acc = mix(acc, sum(x, buf))
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
