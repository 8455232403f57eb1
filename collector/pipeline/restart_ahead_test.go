package pipeline_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// shiftTimes rewrites every RFC 3339 time in the JSON document b with
// shift, as a clock set wrong when it was written (or a hand edit) leaves
// them.
func shiftTimes(t *testing.T, b []byte, shift func(time.Time) time.Time) []byte {
	t.Helper()
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				v[k] = walk(e)
			}
		case []any:
			for i, e := range v {
				v[i] = walk(e)
			}
		case string:
			if tm, err := time.Parse(time.RFC3339Nano, v); err == nil {
				return shift(tm).Format(time.RFC3339Nano)
			}
		}
		return v
	}
	out, err := json.Marshal(walk(doc))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRestart_StateFileAheadOfClock (adv23b, after adv23's D1): the state
// file's watermark of thegram is ahead of the wall clock at the start: the
// box's clock ran fast while serve ran and was set right across a restart,
// or every time in the file was moved ahead (20 h, to 2100). On main at
// e59700e the start took the watermark as it was: every call of thegram
// after the restart was counted too late, never judged, and a write
// accepted with sync pending never had its unverified_write. A start now
// lowers such a watermark to the wall clock plus max_clock_skew (no
// watermark passes it by more: docs/detection.md, Clocks), with a WARN
// naming the partition and both marks, and the new calls are judged.
func TestRestart_StateFileAheadOfClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fast is how far ahead the wall clock ran in the first run.
		fast time.Duration
		// shift moves the times of the state file between the runs.
		shift func(time.Time) time.Time
		// delivering stops the first run while pod-1 delivers: the file
		// keeps its clock, restored at the start.
		delivering bool
	}{
		{name: "file_dated_ahead_20h", shift: func(t time.Time) time.Time { return t.Add(20 * time.Hour) }},
		{name: "file_dated_ahead_20h_source_delivering", shift: func(t time.Time) time.Time { return t.Add(20 * time.Hour) }, delivering: true},
		{name: "file_dated_2100", shift: func(t time.Time) time.Time { return t.AddDate(2100-t.Year(), 0, 0) }},
		{name: "clock_ran_20h_fast", fast: 20 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock(wallStart.Add(tc.fast))
			key := detect.PartitionKey{Server: "thegram"}
			rpc := 0
			r := openRun(t, dir, clock, nil, nil)
			for range 30 {
				rpc++
				if _, err := r.ingest(batch(t, "pod-1", callLine("thegram", "s0", rpc, clock.Now().Add(-time.Second)))); err != nil {
					t.Fatal(err)
				}
				clock.Add(time.Second)
			}
			if !tc.delivering {
				clock.Add(30 * time.Second) // quiet at the stop
			}
			r.status()
			r.stop()
			path := filepath.Join(dir, "partitions.json")
			if tc.shift != nil {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, shiftTimes(t, b, tc.shift), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// The clock set right: a minute after the first run's calls by
			// their senders' clocks.
			clock.Add(time.Minute - tc.fast)
			r = openRun(t, dir, clock, nil, nil)
			if wm, limit := r.status()[key].Watermark, clock.Now().Add(time.Minute); wm.After(limit) {
				t.Errorf("after the restart thegram's watermark is %s, %s ahead of the wall clock; want at most max_clock_skew (1m)", wm, wm.Sub(clock.Now()))
			}
			if tc.shift != nil {
				if logs := r.logs.String(); !strings.Contains(logs, "ahead of the wall clock") || !strings.Contains(logs, "server=thegram") {
					t.Errorf("no WARN naming thegram's watermark ahead of the wall clock; log:\n%s", logs)
				}
			}
			write := batch(t, "pod-1", pendingPatchLine("s1", 900, clock.Now().Add(-time.Second), "team/x.gram"))
			if _, err := r.ingest(write); err != nil {
				t.Fatal(err)
			}
			wid := ids(write)[0]
			unverified := func() bool {
				for _, f := range r.read().findings {
					if f.Kind == audit.KindUnverifiedWrite && len(f.Calls) > 0 && f.Calls[0] == wid {
						return true
					}
				}
				return false
			}
			// Past the write's window (5 m), pod-1 sending reads.
			done := r.stepsUntil(15, func() {
				rpc++
				if _, err := r.ingest(batch(t, "pod-1", callLine("thegram", "s0", rpc, r.clock.Now().Add(-time.Second)))); err != nil {
					t.Fatal(err)
				}
			}, unverified)
			st := r.status()[key]
			if st.TooLate != 0 {
				t.Errorf("%d calls of thegram too late after the restart (watermark %s, wall clock %s); want none", st.TooLate, st.Watermark, clock.Now())
			}
			// pod-1's calls are dated a second behind the wall clock: so
			// is its partition's watermark, once the skew is past.
			if st.Watermark.After(clock.Now()) {
				t.Errorf("minutes after the restart thegram's watermark is %s ahead of the wall clock, its source's calls a second behind it", st.Watermark.Sub(clock.Now()))
			}
			if !done {
				t.Errorf("no unverified_write for the write %s accepted with sync pending after the restart, 7.5 minutes on", wid)
			}
		})
	}
}
