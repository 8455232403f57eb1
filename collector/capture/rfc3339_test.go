package capture

import (
	"math/rand/v2"
	"testing"
	"time"
)

// slowUTCMicro is what the record parser did before parseUTCMicro: the
// answer parseUTCMicro must give whenever it gives one.
func slowUTCMicro(s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, false
	}
	if t = t.UTC(); t.Nanosecond()%1000 != 0 {
		t = t.Round(time.Microsecond)
	}
	return t, true
}

func TestParseUTCMicro(t *testing.T) {
	f := func(in string, fast bool) {
		t.Helper()
		got, ok := parseUTCMicro([]byte(in))
		if ok != fast {
			t.Fatalf("parseUTCMicro(%q) ok = %v, want %v", in, ok, fast)
		}
		if !ok {
			return
		}
		want, wok := slowUTCMicro(in)
		if !wok || got != want {
			t.Fatalf("parseUTCMicro(%q) = %v, time.Parse gives %v (ok %v)", in, got, want, wok)
		}
	}
	f("2026-11-02T09:00:00.533088253Z", true)
	f("2026-11-02T09:00:00.5330885Z", true) // a half rounds up
	f("2026-12-31T23:59:59.9999996Z", true) // into the next year
	f("2026-11-02T09:00:00Z", true)
	f("2026-11-02T09:00:00.1Z", true)
	f("2024-02-29T00:00:00Z", true)
	f("2000-02-29T00:00:00Z", true)
	// Left to time.Parse: offsets, other letters, out-of-range fields,
	// days the month lacks, too many or no fraction digits.
	f("2026-11-02T09:00:00.533+01:00", false)
	f("2026-11-02t09:00:00Z", false)
	f("2026-11-02T09:00:00z", false)
	f("2026-11-02T24:00:00Z", false)
	f("2026-11-02T09:60:00Z", false)
	f("2026-11-02T09:00:60Z", false)
	f("2026-13-02T09:00:00Z", false)
	f("2026-00-02T09:00:00Z", false)
	f("2026-02-29T09:00:00Z", false)
	f("1900-02-29T09:00:00Z", false)
	f("2026-04-31T09:00:00Z", false)
	f("2026-11-00T09:00:00Z", false)
	f("2026-11-02T09:00:00.Z", false)
	f("2026-11-02T09:00:00.1234567891Z", false)
	f("2026-11-02T09:00:00,5Z", false)
	f("2026-11-02T09:00:0xZ", false)
	f("+026-11-02T09:00:00Z", false)
	f("", false)
}

// TestParseUTCMicro_Random: over random times and random corruptions of
// them, whatever parseUTCMicro reads is what time.Parse reads.
func TestParseUTCMicro_Random(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	fast := 0
	for i := 0; i < 200000; i++ {
		tm := time.Unix(rng.Int64N(1<<33), rng.Int64N(1e9)).UTC()
		s := []byte(tm.Format(time.RFC3339Nano))
		if rng.IntN(3) == 0 {
			s[rng.IntN(len(s))] = "0123456789-:TZ.+ x"[rng.IntN(18)]
		}
		got, ok := parseUTCMicro(s)
		if !ok {
			continue
		}
		fast++
		want, wok := slowUTCMicro(string(s))
		if !wok || got != want {
			t.Fatalf("parseUTCMicro(%q) = %v, time.Parse gives %v (ok %v)", s, got, want, wok)
		}
	}
	if fast < 100000 {
		t.Fatalf("only %d of 200000 times read by the fast path", fast)
	}
}

// BenchmarkParseUTCMicro compares the record parser's way of reading a time
// with time.Parse and the rounding it replaces.
func BenchmarkParseUTCMicro(b *testing.B) {
	in := []byte("2026-11-02T09:00:00.533088253Z")
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			parseUTCMicro(in)
		}
	})
	b.Run("time.Parse", func(b *testing.B) {
		for b.Loop() {
			slowUTCMicro(string(in))
		}
	})
}
