package detect

import (
	"strconv"
	"testing"
)

// TestHex64: every write's fingerprints pass through hex64, which must read
// what strconv.ParseUint(s, 16, 64) reads and refuse what it refuses.
func TestHex64(t *testing.T) {
	f := func(s string) {
		t.Helper()
		want, err := strconv.ParseUint(s, 16, 64)
		got, ok := hex64(s)
		if ok != (err == nil) || ok && got != want {
			t.Errorf("hex64(%q) = %x, %v; ParseUint gives %x, %v", s, got, ok, want, err)
		}
	}
	f("0000000000000000")
	f("0123456789abcdef")
	f("FEDCBA9876543210")
	f("ffffffffffffffff")
	f("aBcDeF0123456789")
	f("0123456789abcdeg")
	f("g123456789abcdef")
	f("0123456789abcde ")
	f("+123456789abcdef")
	f("0x23456789abcdef")
	f("01234567_9abcdef")
	f("0123456789abcd/f")
	f("0123456789abcd:f")
	f("0123456789abcd@f")
	f("0123456789abcd`f")
	f("0123456789abcd\x80f")
	f("0123456789abcd\xfff")
	f("\x8a123456789abcdef")
}

// BenchmarkHex64 reads a write's fingerprint:
//
//	go test ./collector/detect -run '^$' -bench Hex64 -count 5
func BenchmarkHex64(b *testing.B) {
	ss := []string{"0123456789abcdef", "9f86d081884c7d65", "FEDCBA9876543210", "5994471abb01112a"}
	var sum uint64
	for i := 0; b.Loop(); i++ {
		v, _ := hex64(ss[i&3])
		sum += v
	}
	if sum == 1 {
		b.Log(sum)
	}
}

// TestObservedListAndMap: a second's observations are found alike whether
// the second lists them or, past secondList, maps them; the first of equal
// hashes stays, and forgotten seconds find nothing.
func TestObservedListAndMap(t *testing.T) {
	const base = etime(1_000_000 * 1e9)
	for _, n := range []int{1, secondList, secondList + 1, 5 * secondList} {
		o := newObserved()
		for i := range n {
			o.add(uint64(i+1), base+etime(i)*1e6)
			o.add(uint64(i+1), base+etime(i)*1e6+5e8) // the first stays
		}
		for i := range n {
			at := base + etime(i)*1e6
			if !o.near(uint64(i+1), at+1e9) || !o.near(uint64(i+1), at-1e9) {
				t.Errorf("n=%d: hash %d not near its time", n, i+1)
			}
			if o.near(uint64(i+1), at+1e9+1) {
				t.Errorf("n=%d: hash %d near a second and a nanosecond after its first time", n, i+1)
			}
		}
		if o.near(uint64(n+1), base) {
			t.Errorf("n=%d: an absent hash is near", n)
		}
		if got := o.len(); got != n {
			t.Errorf("n=%d: len %d", n, got)
		}
		o.forget(base + 2e9)
		if o.near(1, base) || o.len() != 0 {
			t.Errorf("n=%d: forgotten second still found (len %d)", n, o.len())
		}
		// A forgotten second is filled again, and holds only what comes
		// after: hash 1 again, dated in another second.
		if len(o.free) != 1 {
			t.Fatalf("n=%d: %d seconds kept to fill again", n, len(o.free))
		}
		later := base + 10e9
		o.add(1, later)
		if len(o.free) != 0 || o.len() != 1 || !o.near(1, later) || o.near(2, later) || o.near(1, base) {
			t.Errorf("n=%d: a second filled again holds %d observations", n, o.len())
		}
	}
}
