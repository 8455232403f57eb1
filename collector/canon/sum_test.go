package canon

import (
	"fmt"
	"math/rand/v2"
	"strings"
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

// TestSum_Mirror: Sum's walk through the mirror gives what the walk through
// fastjson's public accessors gives, for texts with and without escapes in
// strings and keys, already unescaped or not, and leaves v reading as it
// did.
func TestSum_Mirror(t *testing.T) {
	f := func(s string) {
		t.Helper()
		var p1, p2 fastjson.Parser
		a, err := p1.Parse(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		b, _ := p2.Parse(s)
		var buf []byte
		want := sumPublic(a, &buf) | 1
		if got := Sum(b); got != want {
			t.Errorf("Sum(%s) = %x, the public walk %x", s, got, want)
		}
		// Once more, on a value the first walk unescaped in place.
		if got := Sum(b); got != want {
			t.Errorf("Sum(%s) again = %x, want %x", s, got, want)
		}
		if got, want := b.String(), a.String(); got != want {
			t.Errorf("after Sum, %s reads %s, want %s", s, got, want)
		}
	}
	f(`{"a":1,"b":[true,null,"x"]}`)
	f(`{"a\u0062":"c\n","b":{"\"":"\u00e9"}}`)
	f(`{"k":"plain","e\\":[1e5,-0.5,"\t"]}`)
	f(`["a\/b",{"x":{"y\u0041":false}},{}]`)
	f(`"\ud83d\ude00"`)
	f(`{"content":[{"type":"text","text":"patched reports/q3.gram to rev 42"}],"isError":false}`)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		f(randomJSON(rng, 0))
	}
}

// randomJSON returns a JSON text of random values, strings and keys
// often escaped.
func randomJSON(rng *rand.Rand, depth int) string {
	str := func() string {
		parts := []string{"a", "b", `\\`, `\"`, `\n`, `\u0041`, `\u00e9`, `\/`, "é", " "}
		var b strings.Builder
		b.WriteByte('"')
		for range rng.IntN(4) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		b.WriteByte('"')
		return b.String()
	}
	k := rng.IntN(8)
	if depth > 3 {
		k = 2 + rng.IntN(6)
	}
	switch k {
	case 0:
		var b strings.Builder
		b.WriteByte('{')
		for i := range rng.IntN(4) {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(str() + ":" + randomJSON(rng, depth+1))
		}
		return b.String() + "}"
	case 1:
		var parts []string
		for range rng.IntN(4) {
			parts = append(parts, randomJSON(rng, depth+1))
		}
		return "[" + strings.Join(parts, ",") + "]"
	case 2, 3:
		return str()
	case 4:
		return fmt.Sprint(rng.IntN(1000) - 500)
	case 5:
		return []string{"true", "false", "null"}[rng.IntN(3)]
	case 6:
		return fmt.Sprintf("%g", rng.Float64()*1e6)
	}
	return "1.0e3"
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
