package canon

import (
	"testing"

	"github.com/valyala/fastjson"
)

func TestSum(t *testing.T) {
	sumOf := func(s string) uint64 {
		t.Helper()
		v, err := fastjson.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return Sum(v)
	}
	f := func(a, b string, same bool) {
		t.Helper()
		if got := sumOf(a) == sumOf(b); got != same {
			t.Errorf("Sum(%s) == Sum(%s): %v, want %v", a, b, got, same)
		}
	}
	f(`{"a":1,"b":[true,null,"x"]}`, `{ "b" : [ true , null , "\u0078" ], "a" : 1 }`, true)
	f(`{"a":{"c":"d","e":"f"}}`, `{"a":{"e":"f","c":"d"}}`, true)
	f(`{"a":1}`, `{"a":2}`, false)
	f(`{"a":1}`, `{"b":1}`, false)
	f(`{"a":"1"}`, `{"a":1}`, false)
	f(`[1,2]`, `[2,1]`, false)
	f(`{"a":1,"b":2}`, `{"a":2,"b":1}`, false)
	f(`{"a":{"b":1}}`, `{"a":{},"b":1}`, false)
	f(`true`, `false`, false)
	f(`null`, `{}`, false)
	f(`{"isError":false}`, `{"isError":true}`, false)
	f(`1`, `1.0`, false)
	if Sum(nil) != 0 || sumOf(`null`) == 0 {
		t.Error("Sum: 0 is nil only")
	}
}

// BenchmarkSum hashes a thegram write's result (about 300 bytes), the
// cost each call record or span with a response pays to be told apart
// from another response under its call id:
//
//	go test ./collector/canon -run '^$' -bench Sum -benchmem
func BenchmarkSum(b *testing.B) {
	v, err := fastjson.Parse(`{"content":[{"type":"text","text":"patched reports/q3.gram to rev 42"}],"isError":false,"structuredContent":{"hash":"a81b2c9f00d1","path":"reports/q3.gram","rev":42,"sync":{"state":"synced"},"receipt":{"request_id":"b6c1f0e2-5d7a-4b8e-9a3f-1c2d3e4f5a6b","replayed":false}}}`)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for range b.N {
		Sum(v)
	}
}
