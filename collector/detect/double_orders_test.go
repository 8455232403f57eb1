package detect

import (
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestDoubleApply_LateOrders pins, order by order, what the random orders
// of TestClockAhead_KeysRandom found for double_applied_write on main's
// detector (90f28e3, rnd24): delivered live, with a write late or a pod
// ahead, the double applications that stand are those of time order,
// named with the same calls.
func TestDoubleApply_LateOrders(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 11, 0, 0, 0, time.UTC)
	w := t0.Add(2 * time.Minute)
	f := func(name string, window time.Duration, want int, add func(s *podCalls)) {
		t.Run(name, func(t *testing.T) {
			cfg := NewDefaultConfig()
			cfg.CorrelationWindow = window
			var s podCalls
			s.background("thegram", t0, t0.Add(12*time.Minute), podRight, podAhead)
			add(&s)
			live, inOrder := standing{}, standing{}
			judgeBoth(t, cfg, s.calls, live, inOrder)
			got, in := live.of(audit.KindDoubleAppliedWrite), inOrder.of(audit.KindDoubleAppliedWrite)
			if !slices.Equal(got, in) {
				t.Fatalf("double_applied_write live:\n%s\nin time order:\n%s", lines(got), lines(in))
			}
			if len(got) != want {
				t.Fatalf("%d double applications, want %d:\n%s", len(got), want, lines(got))
			}
		})
	}
	// One edit accepted under three keys, at +0 s, +40 s and +70 s, with
	// a window of 1 minute; the first delivered late, after the third. In
	// order the first is applied twice by the second, and the third, a
	// window after the first, is a first of its own. On main the pair
	// made live of the second and third (the second judged the first
	// application) stood beside the one the late first made.
	f("late_first_displaces_pair", time.Minute, 1, func(s *podCalls) {
		s.addAt(podRight, w.Add(40*time.Second), w.Add(41*time.Second), gramWrite("s", "kb", "a.gram", "x", 1, gramPatched))
		s.addAt(podRight, w.Add(70*time.Second), w.Add(71*time.Second), gramWrite("s", "kc", "a.gram", "x", 1, gramPatched))
		s.addAt(podRight, w, w.Add(75*time.Second), gramWrite("s", "ka", "a.gram", "x", 1, gramPatched))
	})
	// The key k bound to y (+5 s) and then used for x twice (+10 s, +20 s,
	// each a reuse, not a replay: y binds it), x accepted first under j.
	// The use of y comes late, after both: on main the second use of x,
	// judged a replay of the first while y was not seen, stayed one, and
	// its double application was missing.
	f("late_binder_ends_replay", time.Minute, 2, func(s *podCalls) {
		s.addAt(podRight, w, w.Add(time.Second), gramWrite("s", "j", "a.gram", "x", 1, gramPatched))
		s.addAt(podRight, w.Add(10*time.Second), w.Add(11*time.Second), gramWrite("s", "k", "a.gram", "x", 1, gramPatched))
		s.addAt(podRight, w.Add(20*time.Second), w.Add(21*time.Second), gramWrite("s", "k", "a.gram", "x", 1, gramPatched))
		s.addAt(podRight, w.Add(5*time.Second), w.Add(30*time.Second), gramWrite("s", "k", "a.gram", "y", 1, gramPatched))
	})
	// The key k used for x at +0 and again 5 minutes later (window 2
	// minutes), from a pod 2 minutes ahead, then x under m 10 s after.
	// Unused for the window, k is forgotten and its use binds it anew: the
	// use is a first application, and the one under m applies it twice.
	// On main whether the use was a replay depended on whether the sweep
	// had dropped the key: analyze had, serve (its watermark held 2
	// minutes back by the right pod) had not, and found nothing.
	f("idle_key_binds_anew", 2*time.Minute, 1, func(s *podCalls) {
		s.addAt(podRight, w, w.Add(time.Second), gramWrite("s", "k", "a.gram", "x", 1, gramPatched))
		s.addAt(podAhead, w.Add(5*time.Minute), w.Add(3*time.Minute), gramWrite("s", "k", "a.gram", "x", 1, gramPatched))
		s.addAt(podAhead, w.Add(5*time.Minute+10*time.Second), w.Add(3*time.Minute+10*time.Second), gramWrite("s", "m", "a.gram", "x", 1, gramPatched))
	})
}
