package canon

import (
	"hash/maphash"
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
// call. 0 for nil.
func Sum(v *fastjson.Value) uint64 {
	if v == nil {
		return 0
	}
	buf := numBufs.Get().(*[]byte)
	h := sum(v, buf) | 1
	numBufs.Put(buf)
	return h
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
