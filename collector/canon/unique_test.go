package canon

import (
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func TestValidOnce(t *testing.T) {
	f := func(in string, want bool, wantPath string, wantFirst, wantSecond int) {
		t.Helper()
		var p fastjson.Parser
		v, err := p.Parse(in)
		if err != nil {
			t.Fatalf("bad test input %s: %v", in, err)
		}
		if got := ValidOnce(v); got != want {
			t.Fatalf("ValidOnce(%s) = %v, want %v", in, got, want)
		}
		path, first, second, ok := Duplicate([]byte(in))
		if ok != (wantPath != "") || path != wantPath || first != wantFirst || second != wantSecond {
			t.Errorf("Duplicate(%s) = %q %d %d %v, want %q %d %d", in, path, first, second, ok, wantPath, wantFirst, wantSecond)
		}
	}
	f(`{}`, true, "", 0, 0)
	f(`{"a":1,"b":{"a":1},"c":[{"a":1},{"a":2}]}`, true, "", 0, 0)
	f(`{"a":1,"a":1}`, false, "a", 1, 7)
	f(` { "a" : 1 , "b" : { "x" : [ 1 , { "k" : 0 , "k" : 1 } ] } } `, false, "b.x[1].k", 35, 45)
	f(`{"a":1,"\u0061":2}`, false, "a", 1, 7)
	f(`{"\u0061":1,"\u0062":2}`, true, "", 0, 0)
	f(`{"gen_ai.tool":1,"gen_ai.tool":2}`, false, `"gen_ai.tool"`, 1, 17)
	f(`[1,{"":1,"":2}]`, false, `[1].""`, 4, 9)
	f(`"a"`, true, "", 0, 0)
	// Not JSON (Valid says no): ValidOnce says no too.
	f(`{"a":NaN}`, false, "", 0, 0)
	// Many members: sorted, not compared pair by pair.
	var b strings.Builder
	b.WriteString("{")
	for i := range 30 {
		b.WriteString(`"k` + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `":1,`)
	}
	f(b.String()+`"z":1}`, true, "", 0, 0)
	f(b.String()+`"kba":1}`, false, "kba", strings.Index(b.String(), `"kba"`), b.Len())
	f(b.String()+`"k\u0062a":1}`, false, "kba", strings.Index(b.String(), `"kba"`), b.Len())
}
