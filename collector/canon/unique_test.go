package canon

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// TestKeepLast: ValidOnce finds a name given twice, and KeepLast names
// each with its path and both offsets and blanks the earlier copy in
// place. The cases of ValidOnce are strict49's (TestValidOnce).
func TestKeepLast(t *testing.T) {
	f := func(in string, wantOnce bool, wantText string, want ...Repeat) {
		t.Helper()
		var p fastjson.Parser
		v, err := p.Parse(in)
		if err != nil {
			t.Fatalf("bad test input %s: %v", in, err)
		}
		if got := ValidOnce(v); got != wantOnce {
			t.Fatalf("ValidOnce(%s) = %v, want %v", in, got, wantOnce)
		}
		b := []byte(in)
		got := KeepLast(b, nil, 10)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("KeepLast(%s) = %+v, want %+v", in, got, want)
		}
		if wantText == "" {
			wantText = in
		}
		if string(b) != wantText {
			t.Errorf("KeepLast(%s) left\n%s, want\n%s", in, b, wantText)
		}
	}
	f(`{}`, true, "")
	f(`{"a":1,"b":{"a":1},"c":[{"a":1},{"a":2}]}`, true, "")
	f(`{"a":1,"a":2}`, false, `{      "a":2}`, Repeat{"a", 1, 7})
	f(` { "a" : 1 , "b" : { "x" : [ 1 , { "k" : 0 , "k" : 1 } ] } } `, false,
		` { "a" : 1 , "b" : { "x" : [ 1 , {           "k" : 1 } ] } } `, Repeat{"b.x[1].k", 35, 45})
	f(`{"a":1,"\u0061":2}`, false, `{      "\u0061":2}`, Repeat{"a", 1, 7})
	f(`{"\u0061":1,"\u0062":2}`, true, "")
	f(`{"gen_ai.tool":1,"gen_ai.tool":2}`, false, `{                "gen_ai.tool":2}`, Repeat{`"gen_ai.tool"`, 1, 17})
	f(`[1,{"":1,"":2}]`, false, `[1,{     "":2}]`, Repeat{`[1].""`, 4, 9})
	f(`"a"`, true, "")
	// Three copies: the last stands; the two before are blanked.
	f(`{"a":1,"b":0,"a":{"a":2,"a":3},"a":4}`, false, `{      "b":0,`+strings.Repeat(" ", 18)+`"a":4}`,
		Repeat{"a.a", 18, 24}, Repeat{"a", 1, 13}, Repeat{"a", 13, 31})
	// Not JSON (Valid says no): ValidOnce says no too.
	f(`{"a":NaN}`, false, "")
	// Many members: sorted, not compared pair by pair.
	var b strings.Builder
	b.WriteString("{")
	for i := range 30 {
		b.WriteString(`"k` + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `":1,`)
	}
	f(b.String()+`"z":1}`, true, "")
	at := strings.Index(b.String(), `"kba"`)
	blanked := b.String()[:at] + strings.Repeat(" ", len(`"kba":1,`)) + b.String()[at+len(`"kba":1,`):]
	f(b.String()+`"kba":1}`, false, blanked+`"kba":1}`, Repeat{"kba", at, b.Len()})
	f(b.String()+`"k\u0062a":1}`, false, blanked+`"k\u0062a":1}`, Repeat{"kba", at, b.Len()})
}

// FuzzKeepLast: what KeepLast leaves reads, with fastjson's Get (the first
// copy), as encoding/json reads the text it was given (the last), Append
// renders both texts alike, and only a text ValidOnce said no to changes.
func FuzzKeepLast(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":{"b":1,"b":[1,{"c":2,"c":3}]},"a":{"x":1}}`, `[{"a":1,"\u0061":2},{"b":"\"","b":"\\"}]`,
		`{"id":1,"id":2,"params":{"arguments":{"path":"a","p\u0061th":"b"}}}`, `{"a":1,"b":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 512 {
			return
		}
		var p fastjson.Parser
		v, err := p.ParseBytes(b)
		if err != nil || !Valid(v) {
			return
		}
		once := ValidOnce(v)
		want := Append(nil, v)
		var std any
		if json.Unmarshal(b, &std) != nil {
			return // a string that is not UTF-8: encoding/json reads it otherwise
		}
		kept := bytes.Clone(b)
		reps := KeepLast(kept, nil, 1000)
		if once != (len(reps) == 0) || once != bytes.Equal(kept, b) {
			t.Fatalf("%q: ValidOnce %v, KeepLast %+v left %q", b, once, reps, kept)
		}
		var p2 fastjson.Parser
		v2, err := p2.ParseBytes(kept)
		if err != nil {
			t.Fatalf("%q: KeepLast left %q, not JSON: %v", b, kept, err)
		}
		if !ValidOnce(v2) {
			t.Fatalf("%q: KeepLast left %q, a name still given twice", b, kept)
		}
		if got := Append(nil, v2); !bytes.Equal(got, want) {
			t.Fatalf("%q: Append of KeepLast's %q is %s, of the text %s", b, kept, got, want)
		}
		// What was left names each member once, so that fastjson's first
		// copy is its only one; encoding/json reads it as it read the text
		// given, taking the last copy: the copy left is the last.
		var got any
		if err := json.Unmarshal(kept, &got); err != nil || !reflect.DeepEqual(got, std) {
			t.Fatalf("%q: KeepLast left %q, read %v; encoding/json read %v", b, kept, got, std)
		}
	})
}
