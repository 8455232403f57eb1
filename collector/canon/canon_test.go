package canon

import "testing"

func TestBytes(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := string(Bytes([]byte(in))); got != want {
			t.Errorf("Bytes(%s) = %s, want %s", in, got, want)
		}
	}
	f(`{"b": 1, "a": [true, null, "x"]}`, `{"a":[true,null,"x"],"b":1}`)
	f(`{"a":{"z":1,"y":2}}`, `{"a":{"y":2,"z":1}}`)
	f(`"\u0041"`, `"A"`)
	f(`{"a":1,"a":2}`, `{"a":2}`)
	f(`not json`, `not json`)
	f(``, ``)
}

func TestCollapseSpace(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := CollapseSpace(in); got != want {
			t.Errorf("CollapseSpace(%q) = %q, want %q", in, got, want)
		}
	}
	f("  a \n\t b  ", "a b")
	f("async () => {\n  x;\n}", "async () => { x; }")
	f("", "")
	f(" \f\v ", "")
	f("a", "a")
	f("\ra\vb\f", "a b")
	// Appended after other text, the first run is not preceded by a space.
	if got := string(AppendCollapsed([]byte("x"), "  a  b ")); got != "xa b" {
		t.Errorf("AppendCollapsed after x = %q", got)
	}
}

func TestHash(t *testing.T) {
	if Hash([]byte("ab"), []byte("c")) == Hash([]byte("a"), []byte("bc")) {
		t.Fatal("Hash must separate parts")
	}
	if Hash([]byte("a")) != Hash([]byte("a")) {
		t.Fatal("Hash must be deterministic")
	}
}
