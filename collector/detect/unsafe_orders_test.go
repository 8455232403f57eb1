package detect

import (
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestUnsafe_LateOrders pins, order by order, what the random orders of
// TestClockAhead_KeysRandom found for unsafe_retry (24 of 300 orders on
// main ab02569, and 3 of 1000 after the first four were fixed, rnd25):
// delivered live,
// with a call late, the findings that stand are those of time order,
// named with the same calls.
func TestUnsafe_LateOrders(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 11, 0, 0, 0, time.UTC)
	w := t0.Add(2 * time.Minute)
	read := func(session string) func(time.Time, int) string {
		return func(at time.Time, id int) string {
			return gramLine(at, id, session, "gram_read", `{"path":"b.gram"}`,
				`{"isError":false,"structuredContent":{"path":"b.gram","rev":2,"hash":"h2","sync":{"state":"synced"}}}`)
		}
	}
	f := func(name string, kind audit.Kind, want int, add func(s *podCalls)) {
		t.Run(name, func(t *testing.T) {
			cfg := NewDefaultConfig()
			cfg.CorrelationWindow = 2 * time.Minute
			var s podCalls
			s.background("thegram", t0, t0.Add(12*time.Minute), podRight)
			add(&s)
			live, inOrder := standing{}, standing{}
			judgeBoth(t, cfg, s.calls, live, inOrder)
			got, in := live.of(kind), inOrder.of(kind)
			if !slices.Equal(got, in) {
				t.Fatalf("%s live:\n%s\nin time order:\n%s", kind, lines(got), lines(in))
			}
			if len(got) != want {
				t.Fatalf("%d %s, want %d:\n%s", len(got), kind, want, lines(got))
			}
		})
	}
	// Three timeouts of one edit, each re-sent under a new key (+0 s,
	// +20 s, +50 s): in order the second re-sends the first blindly and
	// the third the second. The second comes late, after the third: on
	// main the third, judged first, was paired with the first, and the
	// second, late, found the first reported and the third paired.
	f("late_middle_of_chain", audit.KindUnsafeRetry, 2, func(s *podCalls) {
		s.addAt(podRight, w, w.Add(time.Second), gramWrite("s", "k1", "b.gram", "x", 1, ""))
		s.addAt(podRight, w.Add(50*time.Second), w.Add(51*time.Second), gramWrite("s", "k3", "b.gram", "x", 1, ""))
		s.addAt(podRight, w.Add(20*time.Second), w.Add(55*time.Second), gramWrite("s", "k2", "b.gram", "x", 1, ""))
	})
	// A timeout (+0 s), the writer's read of the target (+20 s) and a
	// re-send under a new key (+40 s); the read comes late, after the
	// re-send. In order the re-send is not blind: on main the pair made
	// before the read came stood.
	f("late_read_ends_pair", audit.KindUnsafeRetry, 0, func(s *podCalls) {
		s.addAt(podRight, w, w.Add(time.Second), gramWrite("s", "k1", "b.gram", "x", 1, ""))
		s.addAt(podRight, w.Add(40*time.Second), w.Add(41*time.Second), gramWrite("s", "k2", "b.gram", "x", 1, gramPatched))
		s.addAt(podRight, w.Add(20*time.Second), w.Add(45*time.Second), read("s"))
	})
	// The edit accepted under k0 (+0 s), a timeout of it under k1
	// (+30 s) and a re-send under k2 (+50 s), on the same base: in order
	// the re-send is the edit's second application (the stronger
	// finding), not an unsafe retry. The first application comes late,
	// after the re-send: on main the unsafe_retry stood beside the double
	// application (rnd24's seed 14).
	f("late_first_makes_resend_double", audit.KindUnsafeRetry, 0, func(s *podCalls) {
		s.addAt(podRight, w.Add(30*time.Second), w.Add(31*time.Second), gramWrite("s", "k1", "b.gram", "x", 1, ""))
		s.addAt(podRight, w.Add(50*time.Second), w.Add(51*time.Second), gramWrite("s", "k2", "b.gram", "x", 1, gramPatched))
		s.addAt(podRight, w, w.Add(55*time.Second), gramWrite("s", "k0", "b.gram", "x", 1, gramPatched))
	})
	// A timeout under k1 on base 1 (+0 s), a re-send under k2 on base 1
	// (+30 s) and one under k3 on base 2 (+90 s). In order the first
	// re-send is blind (an unsafe retry) and the first application, and
	// the second applies it twice. The first re-send comes late, after
	// the second: on main the second, judged first, was the rebased
	// double application of the timeout, which stayed marked reported
	// when the late re-send took its place, and the unsafe retry was
	// missing.
	f("late_resend_displaces_rebased", audit.KindUnsafeRetry, 1, func(s *podCalls) {
		s.addAt(podRight, w, w.Add(time.Second), gramWrite("s", "k1", "b.gram", "x", 1, ""))
		s.addAt(podRight, w.Add(90*time.Second), w.Add(91*time.Second), gramWrite("s", "k3", "b.gram", "x", 2, gramPatched))
		s.addAt(podRight, w.Add(30*time.Second), w.Add(95*time.Second), gramWrite("s", "k2", "b.gram", "x", 1, gramPatched))
	})
	// The key rk bound to a (+0 s); a timeout of x on b.gram under rk
	// (+100 s, a reuse of the key); rk used for b at +125 s (the window
	// since the binder passed: b binds it) and again at +140 s,
	// accepted; x re-sent under nk at +160 s. In order the use at
	// +140 s is a replay of b's binder, accepted: it settles the key's
	// uncertain write (keyed), so the re-send is not blind. The use at
	// +125 s comes late, after the one at +140 s: on main the one at
	// +140 s, judged against a, settled nothing, the late binder made it
	// a replay (rebind) and settled nothing either, and the unsafe_retry
	// stood (3 of 1000 random orders once the rest was fixed).
	f("late_binder_settles_timeout", audit.KindUnsafeRetry, 0, func(s *podCalls) {
		s.addAt(podRight, w, w.Add(time.Second), gramWrite("s0", "rk", "a.gram", "a", 1, gramPatched))
		s.addAt(podRight, w.Add(100*time.Second), w.Add(101*time.Second), gramWrite("s", "rk", "b.gram", "x", 1, ""))
		s.addAt(podRight, w.Add(140*time.Second), w.Add(141*time.Second), gramWrite("s0", "rk", "a.gram", "b", 1, gramPatched))
		s.addAt(podRight, w.Add(125*time.Second), w.Add(150*time.Second), gramWrite("s0", "rk", "a.gram", "b", 1, gramPatched))
		s.addAt(podRight, w.Add(160*time.Second), w.Add(161*time.Second), gramWrite("s", "nk", "b.gram", "x", 1, gramPatched))
	})
}

// TestWasted_FirstForgotten pins what the random orders of
// TestClockAhead_KeysRandom found for wasted_retry on main ab02569 (5 of
// 300 orders, rnd25): which refusal was a first depended on what the
// sweep had forgotten.
func TestWasted_FirstForgotten(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 11, 0, 0, 0, time.UTC)
	w := t0.Add(2 * time.Minute)
	cfg := NewDefaultConfig()
	cfg.CorrelationWindow = 2 * time.Minute
	var s podCalls
	s.background("thegram", t0, t0.Add(12*time.Minute), podRight)
	// One request refused (E_REQUEST_REUSE, fix_input) at +0 s, +100 s
	// and +160 s, and refused for its argument at +290 s. In order the
	// second is the wasted retry of the first, and the third, past the
	// first's window, a first of its own with no retry. On main, when the
	// fourth came, the sweep had forgotten the first (correlation_window
	// + allowed_lateness behind the watermark): the walk began at the
	// second, a first then, and reported the third as its retry. Live,
	// a watermark held further back kept the first and did not.
	s.addAt(podRight, w, w.Add(time.Second), gramWrite("s", "rk", "a.gram", "x", 1, gramReused))
	s.addAt(podRight, w.Add(100*time.Second), w.Add(101*time.Second), gramWrite("s", "rk", "a.gram", "x", 1, gramReused))
	s.addAt(podRight, w.Add(160*time.Second), w.Add(161*time.Second), gramWrite("s", "rk", "a.gram", "x", 1, gramReused))
	s.addAt(podRight, w.Add(290*time.Second), w.Add(291*time.Second), gramWrite("s", "rk", "a.gram", "x", 1, gramArgument))
	live, inOrder := standing{}, standing{}
	judgeBoth(t, cfg, s.calls, live, inOrder)
	got, in := live.of(audit.KindWastedRetry), inOrder.of(audit.KindWastedRetry)
	if !slices.Equal(got, in) {
		t.Fatalf("wasted_retry live:\n%s\nin time order:\n%s", lines(got), lines(in))
	}
	if len(got) != 1 {
		t.Fatalf("%d wasted retries, want 1 (the second refusal of the first):\n%s", len(got), lines(got))
	}
}
