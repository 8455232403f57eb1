package detect

import (
	"testing"
	"time"
)

func TestSpan(t *testing.T) {
	at := func(min int) time.Time { return time.Date(2026, 12, 4, 10, min, 0, 0, time.UTC) }
	f := func(got, want Span) {
		t.Helper()
		if !got.From.Equal(want.From) || !got.To.Equal(want.To) {
			t.Errorf("got [%s, %s], want [%s, %s]", got.From, got.To, want.From, want.To)
		}
	}
	var zero Span
	if !zero.Empty() {
		t.Errorf("the zero Span is not empty")
	}

	var one Span
	one.Add(at(5))
	f(one, Span{at(5), at(5)})
	if one.Empty() {
		t.Errorf("a Span of one point is empty")
	}

	var added Span
	for _, m := range []int{7, 3, 9, 5} {
		added.Add(at(m))
	}
	f(added, Span{at(3), at(9)})

	merge := func(a, b Span) Span { a.Merge(b); return a }
	f(merge(Span{at(1), at(2)}, Span{at(5), at(6)}), Span{at(1), at(6)}) // disjoint
	f(merge(Span{at(5), at(6)}, Span{at(1), at(2)}), Span{at(1), at(6)}) // disjoint, earlier merged in
	f(merge(Span{at(1), at(5)}, Span{at(3), at(8)}), Span{at(1), at(8)}) // overlapping
	f(merge(Span{at(1), at(8)}, Span{at(3), at(5)}), Span{at(1), at(8)}) // inside
	f(merge(Span{at(1), at(2)}, Span{}), Span{at(1), at(2)})             // empty merged in
	f(merge(Span{}, Span{at(3), at(4)}), Span{at(3), at(4)})             // into empty
	f(merge(Span{}, Span{}), Span{})
}
