package detect

import (
	"testing"
	"time"
)

// TestFallenBehind (op20's D4): a partition is behind when calls wait
// past the idle timeout, or, with none waiting, judged writes pending past
// the allowed lateness; a quiet partition with nothing waiting never is,
// whatever its lag (before, any lag past detect.idle_timeout counted).
func TestFallenBehind(t *testing.T) {
	cfg := NewDefaultConfig() // idle_timeout 10s, allowed_lateness 2m
	f := func(lag time.Duration, buffered, pending int, want bool) {
		t.Helper()
		if got := FallenBehind(cfg, lag, buffered, pending); got != want {
			t.Errorf("FallenBehind(lag %s, %d waiting, %d pending) = %v, want %v", lag, buffered, pending, got, want)
		}
	}
	f(time.Second, 3, 0, false)              // busy and on time
	f(11*time.Second, 3, 0, true)            // calls wait past a flush interval
	f(67*time.Second, 0, 0, false)           // op20: thegram-inc's late answer, nothing waits
	f(10*time.Hour, 0, 0, false)             // quiet since a restart, nothing waits
	f(67*time.Second, 0, 2, false)           // writes pending, within the allowed lateness
	f(2*time.Minute+time.Second, 0, 2, true) // writes pending past it
}
