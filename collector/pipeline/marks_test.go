package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

func TestMarks_RoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "partitions.json")
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 123456000, time.UTC)
	want := map[detect.PartitionKey]mark{
		{Server: "thegram"}:                  {Watermark: t0},
		{Tenant: "acme", Server: "oddlynew"}: {Watermark: t0.Add(-time.Hour), Waiting: t0.Add(-30 * time.Minute)},
		{Tenant: "acme", Server: "thegram"}:  {Waiting: t0.Add(time.Minute)},
	}
	floor := t0.Add(-3 * time.Hour)
	saved := t0.Add(2 * time.Hour)
	freedAt := t0.Add(-2 * time.Hour)
	freed := map[detect.PartitionKey]freedMark{{Tenant: "acme", Server: "quiet"}: {wm: freedAt, gen: 7}}
	run := runState{run: runRunning, downtimes: []audit.Downtime{{From: t0.Add(-time.Hour), To: t0.Add(-time.Hour + 4*time.Second), End: audit.EndCrash}}}
	if err := writeMarks(path, want, freed, floor, saved, run); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	got, gotFreed, gotFloor, gotSaved, lost, gotRun := readMarks(path, time.Now(), slog.New(slog.NewTextHandler(&log, nil)))
	if gotRun.run != run.run || len(gotRun.downtimes) != 1 || !gotRun.downtimes[0].From.Equal(run.downtimes[0].From) || !gotRun.downtimes[0].To.Equal(run.downtimes[0].To) || gotRun.downtimes[0].End != audit.EndCrash {
		t.Errorf("run state read back as %+v, want %+v", gotRun, run)
	}
	if lost {
		t.Error("a good state file was taken as lost")
	}
	if !gotFloor.Equal(floor) {
		t.Errorf("floor read back %v, want %v", gotFloor, floor)
	}
	if !gotSaved.Equal(saved) {
		t.Errorf("saved time read back %v, want %v", gotSaved, saved)
	}
	if !maps.EqualFunc(got, want, func(a, b mark) bool {
		return a.Watermark.Equal(b.Watermark) && a.Waiting.Equal(b.Waiting)
	}) {
		t.Errorf("read back %v, want %v", got, want)
	}
	// A freed partition is no partition: it comes back apart, without
	// its number (a number of the run that wrote it).
	if len(gotFreed) != 1 || !gotFreed[detect.PartitionKey{Tenant: "acme", Server: "quiet"}].Equal(freedAt) {
		t.Errorf("freed partitions read back %v, want acme/quiet at %v", gotFreed, freedAt)
	}
	if log.Len() > 0 {
		t.Errorf("a good state file was reported: %s", log.String())
	}
	// No temporary file is left beside it.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("%d files in the data directory, want only the state file", len(entries))
	}
}

func TestMarks_Unreadable(t *testing.T) {
	f := func(name string, content []byte, warned bool) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "partitions.json")
		if content != nil {
			if err := os.WriteFile(path, content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		var log bytes.Buffer
		got, _, floor, saved, lost, _ := readMarks(path, time.Now(), slog.New(slog.NewTextHandler(&log, nil)))
		if got != nil || !floor.IsZero() || !saved.IsZero() {
			t.Errorf("%s: read %v and floor %v, want no marks", name, got, floor)
		}
		// A file that exists and cannot be read is lost: what it said is
		// unknown.
		if lost != warned {
			t.Errorf("%s: lost %v, want %v", name, lost, warned)
		}
		if w := strings.Contains(log.String(), "set aside (not overwritten)"); w != warned {
			t.Errorf("%s: warned %v, want %v; log: %s", name, w, warned, log.String())
		}
		// The file is set aside, whole, so that the first save does not
		// overwrite it (adv46).
		aside, _ := filepath.Glob(path + ".bad-*")
		if !warned {
			if len(aside) != 0 {
				t.Errorf("%s: set aside as %v", name, aside)
			}
			return
		}
		if len(aside) != 1 {
			t.Fatalf("%s: %d files set aside (%v), want 1", name, len(aside), aside)
		}
		if b, err := os.ReadFile(aside[0]); err != nil || !bytes.Equal(b, content) {
			t.Errorf("%s: set aside %q (%v), want the file's content %q", name, b, err, content)
		}
		if _, err := os.Stat(path); err == nil {
			t.Errorf("%s: the state file is still there", name)
		}
		if !strings.Contains(log.String(), "set_aside="+aside[0]) {
			t.Errorf("%s: the log does not name %s: %s", name, aside[0], log.String())
		}
	}
	f("missing (first start)", nil, false)
	f("empty", []byte{}, true)
	f("garbage", []byte("\x00\x01not json"), true)
	f("truncated", []byte(`{"version":2,"partitions":[{"tenant":"","server":"thegr`), true)
	f("other version", []byte(`{"version":1,"partitions":[]}`), true)
	f("wrong type", []byte(`{"version":2,"partitions":{"server":"thegram"}}`), true)
}

// TestMarks_SavedOfOlderFile: a state file of a release that did not keep
// its saved time tells the last run alive at its latest mark or delivery
// (how long the collector was down sets the hold after a restart); one
// without either, at no time.
func TestMarks_SavedOfOlderFile(t *testing.T) {
	f := func(content string, want time.Time) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "partitions.json")
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, _, saved, lost, _ := readMarks(path, time.Now(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if lost || !saved.Equal(want) {
			t.Errorf("%s: saved %v (lost %v), want %v", content, saved, lost, want)
		}
	}
	t0 := time.Date(2026, 12, 4, 11, 0, 0, 0, time.UTC)
	f(`{"version":2,"partitions":[{"tenant":"","server":"thegram","watermark":"2026-12-04T10:59:00Z","waiting":"0001-01-01T00:00:00Z"}]}`, time.Time{})
	f(`{"version":2,"partitions":[{"tenant":"","server":"thegram","watermark":"2026-12-04T10:59:00Z","waiting":"0001-01-01T00:00:00Z","at":"2026-12-04T10:59:58Z"},`+
		`{"tenant":"","server":"oddlynew","watermark":"2026-12-04T10:59:00Z","waiting":"0001-01-01T00:00:00Z","at":"2026-12-04T10:59:59Z","sources":[{"name":"pod-0","clock":"2026-12-04T10:59:00Z","seen":"2026-12-04T11:00:00Z"}]}]}`, t0)
	f(`{"version":2,"partitions":[{"tenant":"","server":"thegram","watermark":"2026-12-04T10:59:00Z","waiting":"0001-01-01T00:00:00Z","at":"2026-12-04T10:59:58Z"}],"saved":"2026-12-04T11:00:00Z"}`, t0)
}

// TestRestartGrace: the grace after a restart is the downtime between
// restart_grace and restart_grace_max; restart_grace when the state file
// does not say when the last run stopped, or when it is the larger.
func TestRestartGrace(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	f := func(grace, graceMax, down time.Duration, want time.Duration) {
		t.Helper()
		cfg := NewDefaultConfig()
		cfg.RestartGrace, cfg.RestartGraceMax = grace, graceMax
		var saved time.Time
		if down != -1 {
			saved = now.Add(-down)
		}
		if got, _ := restartGrace(cfg, saved, now); got != want {
			t.Errorf("restart_grace %v, restart_grace_max %v, down %v: grace %v, want %v", grace, graceMax, down, got, want)
		}
	}
	const s, m = time.Second, time.Minute
	f(30*s, 3*m, -1, 30*s)         // downtime unknown: as before
	f(30*s, 3*m, 5*s, 30*s)        // a rolling restart: the floor
	f(30*s, 3*m, 90*s, 90*s)       // the downtime
	f(30*s, 3*m, 6*m, 3*m)         // capped
	f(30*s, 0, 6*m, 30*s)          // restart_grace_max 0: fixed, as before
	f(5*m, 3*m, 4*m, 5*m)          // an explicit larger restart_grace wins
	f(0, 3*m, 2*s, 2*s)            // no floor
	f(30*s, 3*m, -time.Hour, 30*s) // saved ahead: the clock went back
}

// TestDecodeMarks_Where: a state file that cannot be understood is an
// error that names the line, column, byte and field at fault and why,
// and what was read whole before (or beside) the fault is kept (adv46).
func TestDecodeMarks_Where(t *testing.T) {
	f := func(content, want string, wantGood ...string) {
		t.Helper()
		_, good, err := decodeMarks([]byte(content))
		if err == nil || err.Error() != want {
			t.Errorf("%q:\nerror %v\nwant  %s", content, err, want)
		}
		var se *StateFileError
		if !errors.As(err, &se) {
			t.Errorf("%s: error %T, want a *StateFileError", content, err)
		}
		if !slices.Equal(good, wantGood) {
			t.Errorf("%s: read whole %v, want %v", content, good, wantGood)
		}
	}
	f(``, "the file is empty (0 bytes)")
	f("\x00\x01not json", "line 1, column 1 (byte 0): invalid character '\\x00' looking for beginning of value")
	f(`{"version":2,"partitions":[{"tenant":"","server":"thegr`,
		"line 1, column 56 (byte 55), field partitions[0]: the file ends in the middle of a value (cut short at 55 bytes)", "version")
	f(`{"version":1,"partitions":[]}`, "line 1, column 12 (byte 11), field version: version 1, want 2: written by another release")
	f(`{"version":3,"downtimes":[]}`, "line 1, column 12 (byte 11), field version: version 3, want 2: written by another release")
	f(`{"version":2,"partitions":{"server":"thegram"}}`, "line 1, column 27 (byte 26), field partitions: not an array", "version")
	f("{\"version\":2,\n\"downtimes\":[{\"from\":\"2026-12-07T01:00:00Z\",\"to\":\"2026-12-07T01:01:00Z\"}],\n\"partitions\":[{\"server\":\"a\",\"watermark\":\"yesterday\"}]}",
		`line 3, column 15 (byte 103), field partitions[0]: parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"`, "version", "downtimes")
	f(`{"version":2,"floor":"nope","downtimes":[]}`,
		`line 1, column 22 (byte 21), field floor: parsing time "nope" as "2006-01-02T15:04:05Z07:00": cannot parse "nope" as "2006"`, "version", "downtimes")
	f(`{"version":2} trailing`, "line 1, column 15 (byte 14): 8 bytes after the end of the object", "version")
	f(`{"partitions":[]}`, "field version: no version: written by another release", "partitions")
}

// TestSetAside_Bounded: the state files set aside are bounded: past
// keptAside the oldest go, a second's later files counting after its first
// (a file damaged at every start fills no directory).
func TestSetAside_Bounded(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "partitions.json")
	t0 := time.Date(2026, 12, 7, 4, 15, 0, 0, time.UTC)
	var names []string
	for i := range 12 {
		if err := os.WriteFile(path, []byte(fmt.Sprint(i)), 0o600); err != nil {
			t.Fatal(err)
		}
		// Two starts a second.
		name, err := setAside(path, t0.Add(time.Duration(i/2)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	left, _ := filepath.Glob(path + ".bad-*")
	slices.Sort(left)
	want := slices.Clone(names[len(names)-keptAside:])
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("left %v, want the newest %d: %v", left, keptAside, want)
	}
	if b, _ := os.ReadFile(names[11]); string(b) != "11" {
		t.Errorf("the newest holds %q, want the last file", b)
	}
	if filepath.Base(names[1]) != "partitions.json.bad-20261207T041500Z.2" {
		t.Errorf("the second in a second is %s", filepath.Base(names[1]))
	}
}

// BenchmarkDecodeMarks reads a state file of one partition with 100,000
// sources (9 MB) member by member (decodeMarks), against json.Unmarshal of
// the whole, as releases before adv46 read it: read once at each start.
func BenchmarkDecodeMarks(b *testing.B) {
	wall := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	srcs := make([]detect.SourceClock, 100_000)
	for i := range srcs {
		srcs[i] = detect.SourceClock{Name: fmt.Sprintf("pod-%06d", i), Clock: wall.Add(-10 * time.Second), Seen: wall.Add(-2 * time.Second)}
	}
	f := markFile{Version: stateVersion, Saved: wall, Partitions: []markLine{{Server: "thegram", mark: mark{Watermark: wall, Sources: srcs}}}}
	data, err := json.Marshal(f)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decodeMarks", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, _, err := decodeMarks(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var f markFile
			if err := json.Unmarshal(data, &f); err != nil {
				b.Fatal(err)
			}
		}
	})
}
