package canon

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/valyala/fastjson"
)

// FuzzCanonical: text Canonical accepts is what Bytes makes of it.
func FuzzCanonical(f *testing.F) {
	f.Add([]byte(`{"code":"async () =\u003e {\n  x(\"a\\b\")\t}","n":[1,{}]}`))
	f.Add([]byte(`{"a":"\b\f\r","b":"\/"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var p fastjson.Parser
		if _, err := p.ParseBytes(raw); err != nil {
			return
		}
		if Canonical(raw) && !bytes.Equal(Bytes(raw), raw) {
			t.Fatalf("Canonical(%q), but Bytes gives %q", raw, Bytes(raw))
		}
		checkPrefix(t, raw)
	})
}

// checkPrefix checks that CanonicalPrefix of raw, a JSON value, followed
// by more text, says what Canonical says of raw.
func checkPrefix(t *testing.T, raw []byte) {
	t.Helper()
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 || raw[0] != '{' && raw[0] != '[' {
		if _, ok := CanonicalPrefix(raw); ok {
			t.Fatalf("CanonicalPrefix(%q) ok, which is no object or array", raw)
		}
		return
	}
	raw = bytes.TrimRight(raw, " \t\r\n")
	want := Canonical(raw)
	for _, tail := range []string{"", `}`, `,"z":[1,"}"]}`, `]]`} {
		n, ok := CanonicalPrefix(append(raw[:len(raw):len(raw)], tail...))
		if ok != want || ok && n != len(raw) {
			t.Fatalf("CanonicalPrefix(%q + %q) = %d, %v; Canonical says %v of %d bytes", raw, tail, n, ok, want, len(raw))
		}
	}
}

// TestAppendString: the quoting is strconv's, byte for byte, since
// canonical arguments feed the call ids.
func TestAppendString(t *testing.T) {
	f := func(s string) {
		t.Helper()
		if got, want := string(appendString(nil, []byte(s))), strconv.Quote(s); got != want {
			t.Errorf("appendString(%q) = %s, want %s", s, got, want)
		}
	}
	for c := 0; c < 0x100; c++ {
		f(string([]byte{'a', byte(c), 'z'}))
	}
	f("")
	f("async () => {\n\t\"x\" \\ \x00\x7f}")
	f("é\n")
	f("\xff\n")
}

func TestBytes_KeyOrder(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := string(Bytes([]byte(in))); got != want {
			t.Errorf("Bytes(%s) = %s, want %s", in, got, want)
		}
	}
	f(`{"a":1,"b":{"c":"\n","d":[{"f":1,"e":2}]}}`, `{"a":1,"b":{"c":"\n","d":[{"e":2,"f":1}]}}`)
	f(`{"a":1,"a":1}`, `{"a":1}`)
	f(`{"b":1,"\u0061":2}`, `{"a":2,"b":1}`)
	f(`{"a\u0000":1,"a":2}`, `{"a":2,"a\x00":1}`)
}

// TestHash_Stack: hashing from the stack buffer gives what streaming
// gives, on both sides of the buffer's size.
func TestHash_Stack(t *testing.T) {
	f := func(parts ...[]byte) {
		t.Helper()
		if got, want := Hash(parts...), hashStream(parts); got != want {
			t.Errorf("Hash(%d parts) = %s, want %s", len(parts), got, want)
		}
	}
	f()
	f([]byte("gram_patch"), nil, []byte("x"))
	for _, n := range []int{480, 487, 488, 489, 496, 504, 505, 600, 5000} {
		f(make([]byte, 8), make([]byte, n-16))
	}
	// Stored readings hold fingerprints: they never change (64 bits since
	// readings are stored; the first 64 of the 96 before).
	if got := Hash([]byte("a")); got != "ae6121c88ba555f6" {
		t.Errorf("Hash(a) = %s: fingerprints must not change", got)
	}
}

// TestCanonical: text Canonical accepts is what Bytes makes of it.
func TestCanonical(t *testing.T) {
	f := func(in string, want bool) {
		t.Helper()
		got := Canonical([]byte(in))
		if got != want {
			t.Errorf("Canonical(%s) = %v, want %v", in, got, want)
		}
		if got && string(Bytes([]byte(in))) != in {
			t.Errorf("Canonical(%s), but Bytes gives %s", in, Bytes([]byte(in)))
		}
		checkPrefix(t, []byte(in))
	}
	f(`{"a":1,"b":[true,null,"x",{"c":-1.5e3,"d":{}}],"e":[]}`, true)
	f(`{"":1,"a":2}`, true)
	f(`[{},"x",{"b":1,"a":2}]`, false)
	f(`[{},"x",{"a":1,"b":2}]`, true)
	f(`{"b":1,"a":2}`, false)
	f(`{"a":1,"a":1}`, false)
	f(`{"":1,"":2}`, false)
	f(`{"a": 1}`, false)
	f(`{"a":"x\ny"}`, true)
	f(`{"a":"\"q\" \\ \b\f\r\t"}`, true)
	f(`{"a":"\/"}`, false)
	f(`{"a":"\u0041"}`, false)
	f(`{"a\n":1}`, false)
	f(`{"a":"x\`, false)
	f(`{"a":"\u003e"}`, false)
	f(`{"a":"é"}`, false)
	f(`"plain"`, true)
	f(`12`, true)
	f(`{"a":{"z":1},"b":{"y":1}}`, true)
	f(`{"a":{"z":1},"b":{"y":1,"x":2}}`, false)
}
