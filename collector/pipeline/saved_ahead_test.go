package pipeline_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestRestart_SavedAheadOfClock: a state file that shows the last run alive
// after this start's wall clock (its saved time, a partition's mark time or
// a source's last delivery ahead: the clock was ahead when it was saved and
// set right across the restart, or the file was edited or comes from
// elsewhere) does not tell how long serve was down. Found by adv25 (its
// p1/var/watermark_9999.json, saved_10y_ahead.json, source_seen_10y_ahead.json):
// the start recorded and logged a downtime "from 9999-12-31T23:59:59Z to"
// now, kept in the history of downtimes (status, timeline) for the next 100
// restarts. A time ahead by at most max_clock_skew (a clock stepped back a
// little) is a downtime of none, not one that ends before it begins.
func TestRestart_SavedAheadOfClock(t *testing.T) {
	ahead := func(d time.Duration) string { return wallStart.Add(d).Format(time.RFC3339Nano) }
	for _, tc := range []struct {
		name, file string
		want       []audit.Downtime
		warn       bool
	}{
		{"saved_years_ahead", fmt.Sprintf(`{"version":2,"partitions":[],"saved":%q,"run":"running"}`, ahead(10*365*24*time.Hour)), nil, true},
		{"mark_at_ahead", fmt.Sprintf(`{"version":2,"partitions":[{"tenant":"","server":"s","watermark":%q,"at":"9999-12-31T23:59:59Z"}],"saved":%q,"run":"running"}`,
			ahead(-time.Hour), ahead(-time.Hour)), nil, true},
		{"source_seen_ahead", fmt.Sprintf(`{"version":2,"partitions":[{"tenant":"","server":"s","watermark":%q,"sources":[{"name":"a","clock":%q,"seen":%q}]}],"run":"running"}`,
			ahead(-time.Hour), ahead(-time.Hour), ahead(24*time.Hour)), nil, true},
		{"saved_within_skew", fmt.Sprintf(`{"version":2,"partitions":[],"saved":%q,"run":"stop"}`, ahead(20*time.Second)),
			[]audit.Downtime{{From: wallStart, To: wallStart, End: audit.EndStop}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "partitions.json"), []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			r := openRun(t, dir, newClock(wallStart), nil, nil)
			defer r.stop()
			got := r.p.Downtimes()
			sameDowntimes(t, got, tc.want)
			for _, d := range got {
				if d.From.After(d.To) {
					t.Errorf("a downtime that ends before it begins: %v", d)
				}
			}
			from, to := r.p.LastDowntime()
			if from.After(to) {
				t.Errorf("LastDowntime = %v to %v: ends before it begins", from, to)
			}
			logs := r.logs.String()
			if strings.Contains(logs, "from=9999") || strings.Contains(logs, "from=2036") {
				t.Errorf("the start logs a downtime from the future:\n%s", logs)
			}
			if warned := strings.Contains(logs, "ahead of the wall clock") && strings.Contains(logs, "downtime is unknown"); warned != tc.warn {
				t.Errorf("warned that the downtime is unknown: %v, want %v:\n%s", warned, tc.warn, logs)
			}
		})
	}
}

// TestRestart_HeldAtAheadNamed: a state file whose restart hold's mark
// (held_at) alone is ahead of the wall clock by more than max_clock_skew is
// lowered, and the WARN names what it lowered. Found by adv25 (its
// p1/var/held_at_ahead.json): the WARN said a partition's watermark was
// ahead, with saved_watermark and watermark equal, and did not name held_at.
func TestRestart_HeldAtAheadNamed(t *testing.T) {
	dir := t.TempDir()
	wm := wallStart.Add(-time.Hour).Format(time.RFC3339Nano)
	file := fmt.Sprintf(`{"version":2,"partitions":[{"tenant":"","server":"s","watermark":%q,"at":%q,"held_until":%q,"held_at":%q}],"saved":%q,"run":"running"}`,
		wm, wm, wallStart.Add(2*time.Hour).Format(time.RFC3339Nano), wallStart.Add(time.Hour).Format(time.RFC3339Nano), wm)
	if err := os.WriteFile(filepath.Join(dir, "partitions.json"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	r := openRun(t, dir, newClock(wallStart), nil, nil)
	defer r.stop()
	logs := r.logs.String()
	for _, want := range []string{"ahead of the wall clock", "server=s", "lowered=held_at", "saved_held_at=" + wallStart.Add(time.Hour).Format("2006-01-02T15:04:05")} {
		if !strings.Contains(logs, want) {
			t.Errorf("the WARN does not say %q:\n%s", want, logs)
		}
	}
}

// TestRestart_BackwardDowntimeDropped: a downtime in the state file's
// history that ends before it begins (kept by a release before
// savedBefore, or edited in) is dropped at the start, with a WARN; the
// others stay. Found by adv25 (p1/var/watermark_9999.json, then
// downtimes_200k.json): /api/v1/status showed "seconds": -9223372036.85 for
// the next 100 starts.
func TestRestart_BackwardDowntimeDropped(t *testing.T) {
	dir := t.TempDir()
	good := audit.Downtime{From: wallStart.Add(-2 * time.Hour), To: wallStart.Add(-2*time.Hour + time.Minute), End: audit.EndStop}
	saved := wallStart.Add(-time.Hour)
	file := fmt.Sprintf(`{"version":2,"partitions":[],"saved":%q,"run":"stop","downtimes":[{"from":"9999-12-31T23:59:59Z","to":%q,"end":"crash"},{"from":%q,"to":%q,"end":"stop"}]}`,
		saved.Format(time.RFC3339Nano), wallStart.Add(-3*time.Hour).Format(time.RFC3339Nano), good.From.Format(time.RFC3339Nano), good.To.Format(time.RFC3339Nano))
	if err := os.WriteFile(filepath.Join(dir, "partitions.json"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	r := openRun(t, dir, newClock(wallStart), nil, nil)
	defer r.stop()
	sameDowntimes(t, r.p.Downtimes(), []audit.Downtime{good, {From: saved, To: wallStart, End: audit.EndStop}})
	if logs := r.logs.String(); !strings.Contains(logs, "end before they begin") || !strings.Contains(logs, "dropped=1") {
		t.Errorf("no WARN that one downtime was dropped:\n%s", logs)
	}
}
