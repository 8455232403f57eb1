package ratelog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// lines decodes the JSON log lines written to buf.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		out = append(out, m)
	}
	buf.Reset()
	return out
}

func newTest(cfg Config, level slog.Level) (*Logger, *bytes.Buffer, *time.Time) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level})), cfg)
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	return l, &buf, &now
}

func TestLogger(t *testing.T) {
	t.Run("burst_then_suppressed_then_reported", func(t *testing.T) {
		l, buf, now := newTest(Config{Interval: time.Minute, Burst: 3}, slog.LevelInfo)
		for i := range 10 {
			l.Warn("auth_failure", "rejected a request with a bad token", "remote", "10.0.0.1", "i", i)
		}
		got := lines(t, buf)
		if len(got) != 3 {
			t.Fatalf("%d lines in the first minute, want 3: %v", len(got), got)
		}
		for _, g := range got {
			if g["kind"] != "auth_failure" || g["msg"] != "rejected a request with a bad token" || g["remote"] != "10.0.0.1" {
				t.Errorf("line %v lacks its kind, message or attributes", g)
			}
			if _, ok := g["suppressed"]; ok {
				t.Errorf("line %v reports suppressed lines before any was", g)
			}
		}
		*now = now.Add(59 * time.Second)
		if l.Warn("auth_failure", "x") {
			t.Error("a line within the same minute past the burst was written")
		}
		*now = now.Add(time.Second)
		if !l.Warn("auth_failure", "rejected a request with a bad token") {
			t.Fatal("the first line of the next minute was not written")
		}
		got = lines(t, buf)
		if len(got) != 1 || got[0]["suppressed"] != float64(8) {
			t.Errorf("next minute: %v, want one line with suppressed 8", got)
		}
	})
	t.Run("kinds_are_independent", func(t *testing.T) {
		l, buf, _ := newTest(Config{Interval: time.Minute, Burst: 1}, slog.LevelInfo)
		l.Warn("auth_failure", "a")
		l.Warn("auth_failure", "a")
		l.Warn("store_retry", "b")
		got := lines(t, buf)
		if len(got) != 2 || got[0]["kind"] != "auth_failure" || got[1]["kind"] != "store_retry" {
			t.Errorf("got %v, want one line of each kind", got)
		}
	})
	t.Run("disabled_level_is_not_counted", func(t *testing.T) {
		l, buf, _ := newTest(Config{Interval: time.Minute, Burst: 1}, slog.LevelWarn)
		for range 5 {
			l.Debug("ignored_span", "d")
		}
		l.Warn("ignored_span", "w")
		got := lines(t, buf)
		if len(got) != 1 || got[0]["suppressed"] != nil {
			t.Errorf("got %v, want the warning alone, with nothing suppressed", got)
		}
	})
	t.Run("flush_reports_the_rest", func(t *testing.T) {
		l, buf, _ := newTest(Config{Interval: time.Minute, Burst: 1}, slog.LevelInfo)
		for range 4 {
			l.Info("late_call", "late")
		}
		lines(t, buf)
		l.Flush()
		got := lines(t, buf)
		if len(got) != 1 || got[0]["kind"] != "late_call" || got[0]["suppressed"] != float64(3) {
			t.Errorf("flush: %v, want one line counting 3 late_call lines", got)
		}
		l.Flush()
		if got := lines(t, buf); len(got) != 0 {
			t.Errorf("second flush wrote %v", got)
		}
	})
	t.Run("nil_logger_discards", func(t *testing.T) {
		var l *Logger
		if l.Warn("x", "y") {
			t.Error("a nil Logger wrote")
		}
		l.Flush()
	})
	t.Run("defaults", func(t *testing.T) {
		l := New(nil, Config{})
		if l.cfg != NewDefaultConfig() {
			t.Errorf("config %+v, want the defaults", l.cfg)
		}
	})
}

// TestLogger_Concurrent: under -race, many goroutines share one Logger and
// exactly Burst lines are written, the rest counted.
func TestLogger_Concurrent(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&lockedWriter{&mu, &buf}, nil)), Config{Interval: time.Hour, Burst: 5})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				l.Warn("store_retry", "retrying")
			}
		})
	}
	wg.Wait()
	l.Flush()
	got := lines(t, &buf)
	if len(got) != 6 || got[5]["suppressed"] != float64(795) {
		t.Errorf("%d lines, last %v; want 5 and a flush of 795", len(got), got[len(got)-1])
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestLogFunc: the attributes of a line are made only when it is written;
// the lines past the burst cost nothing but their count, reported by the
// next line written.
func TestLogFunc(t *testing.T) {
	l, buf, now := newTest(Config{Interval: time.Minute, Burst: 2}, slog.LevelInfo)
	made := 0
	args := func() []any { made++; return []any{"n", made} }
	for range 1000 {
		l.WarnFunc("rejected_record", "ingest rejected", args)
	}
	if made != 2 {
		t.Errorf("attributes made %d times for 2 lines written, want 2", made)
	}
	if got := lines(t, buf); len(got) != 2 || got[1]["n"] != float64(2) {
		t.Errorf("lines %v, want 2 with their attributes", got)
	}
	*now = now.Add(time.Minute)
	if !l.WarnFunc("rejected_record", "ingest rejected", args) {
		t.Fatal("the first line of the next minute was not written")
	}
	if got := lines(t, buf); len(got) != 1 || got[0]["suppressed"] != float64(998) || got[0]["n"] != float64(3) {
		t.Errorf("lines %v, want one reporting 998 suppressed", got)
	}
}
