package pipeline_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRestart_DowntimeWarned: at a start after a stop, serve says at WARN
// how long it was down, from when to when, and that calls sent meanwhile
// arrive only from senders that kept them; LastDowntime gives the same
// times for the status. A new data directory (no state file) says
// nothing. Found from outside (op15): after a 2-minute stop the OTel SDK
// exporters on defaults had given up on their batches, 8 of 16 expected
// findings were missing, and nothing in serve said calls may be missing.
func TestRestart_DowntimeWarned(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	if from, to := r.p.LastDowntime(); !from.IsZero() || !to.IsZero() {
		t.Errorf("first start: LastDowntime = %v, %v, want unknown", from, to)
	}
	if strings.Contains(r.logs.String(), "serve was down") {
		t.Errorf("first start warns of a downtime:\n%s", r.logs.String())
	}
	// Stopped 5 s after the last save, with nothing changed since (no
	// partition): the stop saves the file again, so the downtime is
	// counted from the stop, not from the last refresh (which left it up
	// to 10 s too long).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(dir, "partitions.json")); err == nil && strings.Contains(string(b), `"saved"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the state file was not saved after the start")
		}
	}
	clock.Add(5 * time.Second)
	stop := clock.Now()
	r.stop()
	clock.Add(2 * time.Minute)
	r = openRun(t, dir, clock, nil, nil)
	defer r.stop()
	from, to := r.p.LastDowntime()
	if !from.Equal(stop) || !to.Equal(clock.Now()) {
		t.Errorf("LastDowntime = %v to %v, want %v to %v", from, to, stop, clock.Now())
	}
	var line string
	for _, l := range strings.Split(r.logs.String(), "\n") {
		if strings.Contains(l, "serve was down") {
			line = l
		}
	}
	for _, want := range []string{"level=WARN", "downtime=2m0s", "from=" + stop.UTC().Format(time.RFC3339), "to=" + clock.Now().UTC().Format(time.RFC3339),
		`senders="only those that kept their calls`, `otlptracehttp="does not retry a refused connection`, `otlptracegrpc="retries for at most 10 s`, "end=stop", "runbook=docs/runbooks.md#after-serve-was-down"} {
		if !strings.Contains(line, want) {
			t.Errorf("the downtime line %q lacks %q", line, want)
		}
	}
	// The message is short; the details are fields (op23 D14: a message
	// of ~600 characters before the times).
	msg := regexp.MustCompile(`msg="([^"]*)"`).FindStringSubmatch(line)
	if msg == nil || len(msg[1]) > 80 {
		t.Errorf("the downtime line's message %q: want at most 80 characters, the details in fields", msg)
	}
}
