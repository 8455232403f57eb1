package sqlite

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// logLine is one JSON line of a captured slog logger.
type logLine struct {
	Level   string   `json:"level"`
	Msg     string   `json:"msg"`
	Calls   *int64   `json:"calls"`
	Done    *int64   `json:"done"`
	From    *int     `json:"from_schema"`
	Reason  string   `json:"reason"`
	Elapsed *float64 `json:"elapsed"`
}

// captured returns a logger writing JSON lines to a buffer, and a function
// that parses what it wrote.
func captured(t testing.TB) (*slog.Logger, func() []logLine) {
	t.Helper()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	return log, func() []logLine {
		var out []logLine
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if l == "" {
				continue
			}
			var ll logLine
			if err := json.Unmarshal([]byte(l), &ll); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			out = append(out, ll)
		}
		buf.Reset()
		return out
	}
}

// expectLines checks that lines holds, in this order, lines whose message
// begins with each of want's, and returns them.
func expectLines(t testing.TB, lines []logLine, want ...string) []logLine {
	t.Helper()
	var got []logLine
	i := 0
	for _, l := range lines {
		if i < len(want) && strings.HasPrefix(l.Msg, want[i]) {
			got = append(got, l)
			i++
		}
	}
	if i < len(want) {
		var msgs []string
		for _, l := range lines {
			msgs = append(msgs, l.Msg)
		}
		t.Fatalf("log lines %q, want lines beginning %q in this order", msgs, want)
	}
	return got
}

func expectCount(t testing.TB, what string, v *int64, want int64) {
	t.Helper()
	if v == nil || *v != want {
		t.Errorf("%s: calls/done = %v, want %d", what, v, want)
	}
}

// TestOpen_LogsLongSteps: opening a schema-3 file logs the migration's
// start and end with the count of calls, its progress, and the build of
// the id index; an open that finds the index missing or of another epoch
// logs its rebuild; opening a new store logs nothing.
func TestOpen_LogsLongSteps(t *testing.T) {
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = 0 // a progress line at every page
	path := copyFixture(t, "schema3.db")
	log, lines := captured(t)
	open := func() {
		t.Helper()
		s, err := Open(path, Options{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}

	open()
	got := expectLines(t, lines(),
		"migrating the store:",
		"migrating the store",
		"migrated the store",
		"building the call id index:",
		"building the call id index",
		"built the call id index")
	if got[0].From == nil || *got[0].From != 3 {
		t.Errorf("migration start names schema %v, want 3", got[0].From)
	}
	expectCount(t, "migration start", got[0].Calls, 300)
	expectCount(t, "migration progress", got[1].Done, 300)
	expectCount(t, "migration end", got[2].Calls, 300)
	if got[2].Elapsed == nil {
		t.Error("migration end without its elapsed time")
	}
	expectCount(t, "index build start", got[3].Calls, 300)
	expectCount(t, "index build progress", got[4].Done, 300)
	expectCount(t, "index build end", got[5].Calls, 300)
	if got[5].Elapsed == nil {
		t.Error("index build end without its elapsed time")
	}

	t.Run("no migration, index there", func(t *testing.T) {
		open()
		if l := lines(); len(l) != 0 {
			t.Fatalf("a plain open logged %+v", l)
		}
	})
	t.Run("index missing", func(t *testing.T) {
		if err := os.RemoveAll(IDIndexDir(path)); err != nil {
			t.Fatal(err)
		}
		open()
		got := expectLines(t, lines(), "building the call id index:", "built the call id index")
		expectCount(t, "index build start", got[0].Calls, 300)
		expectCount(t, "index build end", got[1].Calls, 300)
		if got[0].Reason == "" {
			t.Error("index build start without its reason")
		}
	})
	t.Run("index of another epoch", func(t *testing.T) {
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = db.Exec(`UPDATE meta SET value = 'x' WHERE key = ?`, idsEpochMeta)
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		open()
		got := expectLines(t, lines(), "rebuilding the call id index:", "built the call id index")
		if got[0].Level != "WARN" || got[0].Reason != "another epoch" {
			t.Errorf("rebuild start %+v, want a warning saying another epoch", got[0])
		}
		expectCount(t, "rebuild start", got[0].Calls, 300)
		expectCount(t, "rebuild end", got[1].Calls, 300)
	})
	t.Run("new store", func(t *testing.T) {
		s, err := Open(filepath.Join(t.TempDir(), "new.db"), Options{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if l := lines(); len(l) != 0 {
			t.Fatalf("opening a new store logged %+v", l)
		}
	})
}

// TestProgress_Heartbeat: a heartbeat logs while it runs, and nothing once
// stopped; a nil progress logs nothing.
func TestProgress_Heartbeat(t *testing.T) {
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = time.Millisecond
	log, lines := captured(t)
	stop := newProgress(log, "x", 7).heartbeat("still at it")
	time.Sleep(50 * time.Millisecond)
	stop()
	got := lines()
	if len(got) == 0 {
		t.Fatal("no heartbeat line in 50 ms at one every millisecond")
	}
	for _, l := range got {
		if l.Msg != "still at it" || l.Calls == nil || *l.Calls != 7 || l.Elapsed == nil {
			t.Fatalf("heartbeat line %+v, want msg, calls 7 and elapsed", l)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if l := lines(); len(l) != 0 {
		t.Fatalf("%d heartbeat lines after stop", len(l))
	}
	var p *progress
	p.heartbeat("nothing")()
}

// TestOpen_ReportsProgress: Options.OnProgress is told each long step of
// Open as it starts (0 done) and each batch it gets through, to the last
// (all done): the migration of a schema-3 file, then the build of its id
// index; a rebuild alone when the index is gone; nothing when neither runs.
func TestOpen_ReportsProgress(t *testing.T) {
	path := copyFixture(t, "schema3.db")
	open := func() (steps []string, last map[string]Progress) {
		t.Helper()
		last = map[string]Progress{}
		s, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler), OnProgress: func(p Progress) {
			if prev, ok := last[p.Step]; !ok {
				steps = append(steps, p.Step)
				if p.Done != 0 {
					t.Errorf("%s began at %d done, want 0", p.Step, p.Done)
				}
			} else if p.Done < prev.Done || p.Total != prev.Total {
				t.Errorf("%s went from %+v to %+v", p.Step, prev, p)
			}
			last[p.Step] = p
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return steps, last
	}
	check := func(steps []string, last map[string]Progress, want ...string) {
		t.Helper()
		if strings.Join(steps, ", ") != strings.Join(want, ", ") {
			t.Fatalf("steps %q, want %q", steps, want)
		}
		for _, step := range want {
			if p := last[step]; p.Done != 300 || p.Total != 300 {
				t.Errorf("%s ended at %+v, want 300 of 300", step, p)
			}
		}
	}
	steps, last := open()
	check(steps, last, "migrating the store", "building the call id index")
	if err := os.RemoveAll(IDIndexDir(path)); err != nil {
		t.Fatal(err)
	}
	steps, last = open()
	check(steps, last, "building the call id index")
	steps, last = open()
	check(steps, last)
}
