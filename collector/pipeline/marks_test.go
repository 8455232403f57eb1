package pipeline

import (
	"bytes"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	if err := writeMarks(path, want, floor); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	got, gotFloor, lost := readMarks(path, slog.New(slog.NewTextHandler(&log, nil)))
	if lost {
		t.Error("a good state file was taken as lost")
	}
	if !gotFloor.Equal(floor) {
		t.Errorf("floor read back %v, want %v", gotFloor, floor)
	}
	if !maps.EqualFunc(got, want, func(a, b mark) bool {
		return a.Watermark.Equal(b.Watermark) && a.Waiting.Equal(b.Waiting)
	}) {
		t.Errorf("read back %v, want %v", got, want)
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
		got, floor, lost := readMarks(path, slog.New(slog.NewTextHandler(&log, nil)))
		if got != nil || !floor.IsZero() {
			t.Errorf("%s: read %v and floor %v, want no marks", name, got, floor)
		}
		// A file that exists and cannot be read is lost: what it said is
		// unknown.
		if lost != warned {
			t.Errorf("%s: lost %v, want %v", name, lost, warned)
		}
		if w := strings.Contains(log.String(), "cannot read the partitions' watermarks"); w != warned {
			t.Errorf("%s: warned %v, want %v; log: %s", name, w, warned, log.String())
		}
	}
	f("missing (first start)", nil, false)
	f("empty", []byte{}, true)
	f("garbage", []byte("\x00\x01not json"), true)
	f("truncated", []byte(`{"version":2,"partitions":[{"tenant":"","server":"thegr`), true)
	f("other version", []byte(`{"version":1,"partitions":[]}`), true)
	f("wrong type", []byte(`{"version":2,"partitions":{"server":"thegram"}}`), true)
}
