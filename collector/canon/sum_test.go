package canon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/internal/capgen"
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

// TestSum_Mirror: Sum read through the mirror of fastjson's Value gives
// what the walk through fastjson's accessors gives (sumPublic), for every
// line of the examples and of a generated capture with 2 % noise, for each
// of their results and arguments, for hand-written values with escapes in
// strings and keys, repeated keys and numbers of every form, and for values
// already read through the accessors (strings unescaped, keys unescaped)
// or partly so.
func TestSum_Mirror(t *testing.T) {
	if !mirrorFits {
		t.Skip("the mirror does not fit this fastjson: Sum walks the accessors")
	}
	var texts []string
	files, _ := filepath.Glob("../../testdata/examples/*.ndjson")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			texts = append(texts, l)
		}
	}
	c := capgen.Generate(capgen.Config{Seed: 9, Sessions: 400, Span: time.Hour, AnomalyRate: 0.5, NoiseRate: 0.02})
	for _, l := range c.Lines {
		texts = append(texts, string(l))
	}
	texts = append(texts,
		`{"a":1,"b":[true,null,"x"]}`, `{ "b" : [ true , null , "\u0078" ], "a" : 1 }`,
		`{"a\u0062":1}`, `{"ab":1}`, `{"a\"b":"c\\d","e":"\n\t\/"}`, `{"a":1,"a":2}`, `{"a":2,"a":1}`,
		`["\u00e9","é","\ud83d\ude00",""]`, `{"":""}`, `[1,-0,1.5e3,1E-2,0.0,-12.25]`,
		`{"k":{"x\u0020y":[{"z":"q\\"}]}}`, `"a\\b"`, `"plain"`, `12`, `true`, `false`, `null`, `[]`, `{}`,
		`[[[[{"a":[[["deep\u0021"]]]}]]]]`,
	)
	var p1, p2 fastjson.Parser
	var n, escaped int
	check := func(text string, touch func(v *fastjson.Value)) {
		t.Helper()
		v1, err := p1.Parse(text)
		if err != nil {
			return
		}
		v2, _ := p2.Parse(text)
		if touch != nil {
			touch(v1)
			touch(v2)
		}
		want := sumPublic(v2) | 1
		if got := Sum(v1); got != want {
			t.Fatalf("Sum(%s) = %x through the mirror, %x through the accessors", text, got, want)
		}
		n++
		if strings.Contains(text, `\`) {
			escaped++
		}
	}
	for _, text := range texts {
		check(text, nil)
		// Read partly through the accessors first, as the record parser
		// and the dialect readers do before a sum.
		check(text, func(v *fastjson.Value) { v.Get("response", "result"); v.Get("request", "params", "name") })
		check(text, func(v *fastjson.Value) { v.Get("nothing") })
		check(text, func(v *fastjson.Value) {
			if o, err := v.Object(); err == nil {
				o.Visit(func(_ []byte, x *fastjson.Value) { x.Type() })
			}
		})
		v, err := p1.Parse(text)
		if err != nil || v.Type() != fastjson.TypeObject {
			continue
		}
		for _, path := range [][]string{{"response", "result"}, {"request", "params", "arguments"}, {"response", "error"}} {
			if x := v.Get(path...); x != nil {
				check(string(x.MarshalTo(nil)), nil)
			}
		}
	}
	if n < 5000 || escaped < 200 {
		t.Fatalf("%d values compared, %d with escapes: the inputs no longer take every way", n, escaped)
	}
}
