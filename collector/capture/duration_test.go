package capture

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// TestDecoder_DurationOutOfRange: a duration_ms that a time.Duration
// cannot hold (about 292 years, 9223372036854 ms) would wrap to a large
// negative duration. It rejects its record alone, naming the field and
// why; the largest that fits is taken, and so are the lines around.
func TestDecoder_DurationOutOfRange(t *testing.T) {
	f := func(ms string, want time.Duration, wantErr string) {
		t.Helper()
		line := strings.Replace(good, `"server"`, `"duration_ms":`+ms+`,"server"`, 1)
		d, err := NewDecoder(bytes.NewReader([]byte(good+"\n"+line+"\n"+good+"\n")), "in")
		if err != nil {
			t.Fatal(err)
		}
		var calls int
		var rejects []error
		for {
			c, err := d.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				rejects = append(rejects, err)
				continue
			}
			calls++
			// Milliseconds go through a float64: the largest lands within
			// a microsecond of its value.
			if diff := c.Duration - want; calls == 2 && wantErr == "" && (diff < -time.Microsecond || diff > time.Microsecond) {
				t.Errorf("duration_ms %s: duration %v, want %v", ms, c.Duration, want)
			}
		}
		if wantErr == "" {
			if calls != 3 || len(rejects) != 0 {
				t.Errorf("duration_ms %s: %d calls, rejects %v; want 3 and none", ms, calls, rejects)
			}
			return
		}
		if calls != 2 || len(rejects) != 1 {
			t.Fatalf("duration_ms %s: %d calls, rejects %v; want the 2 others and one reject", ms, calls, rejects)
		}
		var re *RecordError
		if !errors.As(rejects[0], &re) || re.Line != 2 || re.Field != "duration_ms" || rejects[0].Error() != wantErr {
			t.Errorf("duration_ms %s: reject %q, want %q", ms, rejects[0], wantErr)
		}
	}
	const tooLong = " ms is longer than a duration can hold (at most 9223372036854 ms, about 292 years)"
	f("1e308", 0, "in:2: field duration_ms: 1e308"+tooLong)
	f("1e400", 0, "in:2: field duration_ms: 1e400"+tooLong)
	f("9223372036855", 0, "in:2: field duration_ms: 9223372036855"+tooLong)
	f("-5", 0, "in:2: field duration_ms: must be a non-negative number")
	f("-1e308", 0, "in:2: field duration_ms: must be a non-negative number")
	f("9223372036854", 9223372036854*time.Millisecond, "")
	f("38.5", 38500*time.Microsecond, "")
	f("0", 0, "")
}
