package detect

import (
	"strings"
	"testing"
	"time"
)

// TestSlowPodJoiningWithinJoinWaitHolds: two pods of thegram start
// together, as the OpenTelemetry SDK's batch span processors of one
// deployment do; each delivers its first batch when its own schedule delay
// (5 s by default) first fires, so the second pod's first delivery comes
// seconds after the first pod's. The second pod's clock is 3 minutes slow,
// more than allowed_lateness (2 m) and less than max_clock_lag (15 m). Its
// calls must be judged: the partition, new, waits for its sources for
// join_wait (10 s, the idle timeout's default, the bound the exporters'
// flush interval must stay under) before it takes a watermark. Before, it waited 2 s (twice the
// lateness), and a pod joining 3 s after the first had every call counted
// too late (found from outside with the SDK: 5 findings of 16 missing).
func TestSlowPodJoiningWithinJoinWaitHolds(t *testing.T) {
	for _, join := range []time.Duration{3 * time.Second, 5 * time.Second, 8 * time.Second} {
		t.Run(join.String(), func(t *testing.T) {
			f := newPodFeed(t)
			e := f.e
			start := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
			wall := start
			for range 90 {
				f.add("otlp:thegram/on-time", wall.Add(-time.Second), wall)
				if wall.Sub(start) >= join {
					f.add("otlp:thegram/slow3m", wall.Add(-3*time.Minute), wall)
				}
				wall = wall.Add(time.Second)
				e.Tick(wall)
			}
			ps := e.Status(wall)[0]
			for _, s := range ps.Sources {
				if s.TooLate != 0 {
					t.Errorf("source %s: %d calls too late, want none: a pod joining %s after the first, within the join wait, holds its server", s.Name, s.TooLate, join)
				}
			}
			if ps.HeldBy != "otlp:thegram/slow3m" {
				t.Errorf("held_by %q, want otlp:thegram/slow3m, the slow pod", ps.HeldBy)
			}
		})
	}
}

// TestPodJoiningAfterJoinWaitTooFarBehindHoldsNothing: the wait ends
// at join_wait. A pod 10 minutes behind that first delivers later
// than that is a source too far behind, as documented: its calls are too
// late, and it holds nothing back.
func TestPodJoiningAfterJoinWaitTooFarBehindHoldsNothing(t *testing.T) {
	f := newPodFeed(t)
	e := f.e
	start := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	wall := start
	join := NewDefaultConfig().JoinWait + 5*time.Second
	late := 0
	for range 90 {
		f.add("otlp:thegram/on-time", wall.Add(-time.Second), wall)
		if wall.Sub(start) >= join {
			f.add("otlp:thegram/behind10m", wall.Add(-10*time.Minute), wall)
			late++
		}
		wall = wall.Add(time.Second)
		e.Tick(wall)
	}
	ps := e.Status(wall)[0]
	if ps.HeldBy != "otlp:thegram/on-time" {
		t.Errorf("held_by %q, want otlp:thegram/on-time", ps.HeldBy)
	}
	for _, s := range ps.Sources {
		if s.Name == "otlp:thegram/behind10m" && int(s.TooLate) != late {
			t.Errorf("%d of the pod's %d calls too late, want all", s.TooLate, late)
		}
	}
}

// TestJoinWaitShorter: with join_wait set to 2 s (the wait before
// 2026-12-05), the same slow pod joining 3 s after the first is too far
// behind the watermark the partition took meanwhile: every call of it too
// late. So the wait is what keeps it judged.
func TestJoinWaitShorter(t *testing.T) {
	cfg := NewDefaultConfig()
	cfg.JoinWait = 2 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	f := newPodFeed(t)
	f.e = NewEngine(cfg)
	f.e.ClockPerPartition()
	start := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	wall := start
	sent := 0
	for range 60 {
		f.add("otlp:thegram/on-time", wall.Add(-time.Second), wall)
		if wall.Sub(start) >= 3*time.Second {
			f.add("otlp:thegram/slow3m", wall.Add(-3*time.Minute), wall)
			sent++
		}
		wall = wall.Add(time.Second)
		f.e.Tick(wall)
	}
	for _, s := range f.e.Status(wall)[0].Sources {
		if s.Name == "otlp:thegram/slow3m" && int(s.TooLate) != sent {
			t.Errorf("%d of the slow pod's %d calls too late with a 2 s join wait, want all", s.TooLate, sent)
		}
	}
	cfg.JoinWait = -time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "join_wait") {
		t.Errorf("Validate with a negative join_wait: %v, want an error naming join_wait", err)
	}
}
