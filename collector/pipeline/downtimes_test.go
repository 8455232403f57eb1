package pipeline_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
)

// savedRunning waits until the state file in dir says the run is running
// and returns its saved time.
func savedRunning(t *testing.T, dir string) time.Time {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(dir, "partitions.json"))
		var f struct {
			Saved time.Time `json:"saved"`
			Run   string    `json:"run"`
		}
		if err == nil && json.Unmarshal(b, &f) == nil && f.Run == "running" && !f.Saved.IsZero() {
			return f.Saved
		}
		if time.Now().After(deadline) {
			t.Fatalf("the state file does not say the run is running: %s", b)
		}
	}
}

func sameDowntimes(t *testing.T, got, want []audit.Downtime) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = got[i].From.Equal(want[i].From) && got[i].To.Equal(want[i].To) && got[i].End == want[i].End
	}
	if !ok {
		t.Errorf("Downtimes =\n%v\nwant\n%v", got, want)
	}
}

// TestRestart_DowntimesKept: every start adds the downtime before it to
// the history the state file keeps, with how the run before ended: a
// clean stop, or a crash (a run that never made its final save). An
// earlier downtime is not forgotten at the next restart (op17: only the
// latest was told, for an hour).
func TestRestart_DowntimesKept(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	if d := r.p.Downtimes(); len(d) != 0 {
		t.Errorf("first start: Downtimes = %v, want none", d)
	}
	savedRunning(t, dir)
	clock.Add(5 * time.Second)
	stop := clock.Now()
	r.stop()

	clock.Add(2 * time.Minute)
	r = openRun(t, dir, clock, nil, nil)
	want := []audit.Downtime{{From: stop, To: clock.Now(), End: audit.EndStop}}
	sameDowntimes(t, r.p.Downtimes(), want)
	// Killed: the file keeps its last save, which says running.
	last := savedRunning(t, dir)
	clock.Add(3 * time.Second)
	r.crash()

	clock.Add(3 * time.Minute)
	r = openRun(t, dir, clock, nil, nil)
	want = append(want, audit.Downtime{From: last, To: clock.Now(), End: audit.EndCrash})
	sameDowntimes(t, r.p.Downtimes(), want)
	if !strings.Contains(r.logs.String(), "end=crash") {
		t.Errorf("the start after a crash does not say so:\n%s", r.logs.String())
	}
	// Written with the file while it runs: the next start still has both.
	savedRunning(t, dir)
	clock.Add(time.Second)
	stop = clock.Now()
	r.stop()
	clock.Add(time.Minute)
	r = openRun(t, dir, clock, nil, nil)
	defer r.stop()
	want = append(want, audit.Downtime{From: stop, To: clock.Now(), End: audit.EndStop})
	sameDowntimes(t, r.p.Downtimes(), want)
}

// TestRestart_DowntimesBounded: the history keeps the last DowntimesKept
// downtimes; a state file of a release that did not say how its run ended
// gives "unknown".
func TestRestart_DowntimesBounded(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	var old []audit.Downtime
	at := wallStart.Add(-48 * time.Hour)
	for i := range pipeline.DowntimesKept {
		old = append(old, audit.Downtime{From: at.Add(time.Duration(i) * time.Minute), To: at.Add(time.Duration(i)*time.Minute + 10*time.Second), End: audit.EndStop})
	}
	saved := wallStart.Add(-time.Hour)
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	file := fmt.Sprintf(`{"version":2,"partitions":[],"saved":%q,"downtimes":%s}`, saved.Format(time.RFC3339Nano), b)
	if err := os.WriteFile(filepath.Join(dir, "partitions.json"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	r := openRun(t, dir, clock, nil, nil)
	defer r.stop()
	want := append(old[1:], audit.Downtime{From: saved, To: clock.Now(), End: audit.EndUnknown})
	sameDowntimes(t, r.p.Downtimes(), want)
	savedRunning(t, dir)
	var f struct {
		Downtimes []audit.Downtime `json:"downtimes"`
	}
	b, err = os.ReadFile(filepath.Join(dir, "partitions.json"))
	if err != nil || json.Unmarshal(b, &f) != nil {
		t.Fatal(err)
	}
	sameDowntimes(t, f.Downtimes, want)
}

// TestReadDowntimes: a reader of the data directory with serve stopped
// (mcpaudit timeline --data-dir) reads from the state file the downtimes
// the run that saved it kept, a crash's included; no file is no history,
// and a damaged one an error, not an empty history.
func TestReadDowntimes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "partitions.json")
	if ds, err := pipeline.ReadDowntimes(path); err != nil || len(ds) != 0 {
		t.Errorf("no state file: ReadDowntimes = %v, %v; want none, no error", ds, err)
	}
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	savedRunning(t, dir)
	clock.Add(time.Second)
	r.stop()
	clock.Add(time.Minute)
	r = openRun(t, dir, clock, nil, nil)
	last := savedRunning(t, dir)
	r.crash()
	clock.Add(2 * time.Minute)
	r = openRun(t, dir, clock, nil, nil)
	savedRunning(t, dir)
	want := r.p.Downtimes()
	r.stop()
	if len(want) != 2 || want[1].End != audit.EndCrash || !want[1].From.Equal(last) {
		t.Fatalf("Downtimes = %v, want a stop, then a crash from %v", want, last)
	}
	got, err := pipeline.ReadDowntimes(path)
	if err != nil {
		t.Fatal(err)
	}
	sameDowntimes(t, got, want)

	if err := os.WriteFile(path, []byte(`{"version":2,"partitions":[`), 0o644); err != nil {
		t.Fatal(err)
	}
	if ds, err := pipeline.ReadDowntimes(path); err == nil {
		t.Errorf("a damaged state file: ReadDowntimes = %v, want an error", ds)
	}
	if err := os.WriteFile(path, []byte(`{"version":3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.ReadDowntimes(path); err == nil || !strings.Contains(err.Error(), "version 3") {
		t.Errorf("a state file of another version: error %v, want one naming it", err)
	}
}
