package pipeline_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/pipeline"
)

// TestRestart_DamagedStateFileSetAside: a state file that cannot be
// understood (here cut short in its partitions) is set aside, whole, as
// partitions.json.bad-TIME before the first save could overwrite it; the
// start says where, and where in the file it went wrong (line, column,
// byte, field); the history of downtimes read whole before the fault is
// kept. Before adv46 the start logged the error and the first save
// replaced the file: what it said, and its history, were gone.
func TestRestart_DamagedStateFileSetAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "partitions.json")
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	savedRunning(t, dir)
	clock.Add(time.Second)
	r.stop()
	clock.Add(time.Minute)
	r = openRun(t, dir, clock, nil, nil)
	if _, err := r.ingest(batch(t, "pod-0", callLine("thegram", "s1", 1, clock.Now().Add(-time.Second)))); err != nil {
		t.Fatal(err)
	}
	clock.Add(2 * time.Second)
	r.steps(2, nil)
	want := r.p.Downtimes()
	r.stop()
	if len(want) != 1 {
		t.Fatalf("Downtimes = %v, want the one stop", want)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte(`"partitions":[{`))
	if i < 0 {
		t.Fatalf("no partition in the state file: %s", b)
	}
	damaged := b[:i+len(`"partitions":[{"tenant":"","ser`)]
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}

	clock.Add(time.Minute)
	r = openRun(t, dir, clock, nil, nil)
	aside, _ := filepath.Glob(path + ".bad-*")
	if len(aside) != 1 || filepath.Base(aside[0]) != "partitions.json.bad-"+clock.Now().UTC().Format("20060102T150405Z") {
		t.Fatalf("set aside as %v, want partitions.json.bad-%s", aside, clock.Now().UTC().Format("20060102T150405Z"))
	}
	logs := r.logs.String()
	for _, s := range []string{"set aside (not overwritten)", "set_aside=" + aside[0], "field partitions[0]: the file ends in the middle of a value",
		"line 1, column", "kept=downtimes"} {
		if !strings.Contains(logs, s) {
			t.Errorf("the start-up log does not say %q:\n%s", s, logs)
		}
	}
	sameDowntimes(t, r.p.Downtimes(), want)
	if tr := r.p.StateFileTrouble(); tr == nil || tr.SetAside != aside[0] || !strings.Contains(tr.Reason, "partitions[0]") {
		t.Errorf("StateFileTrouble = %+v, want the file set aside as %s and why", tr, aside[0])
	}
	// Saves go on beside it, and leave it alone.
	r.steps(2, nil)
	savedRunning(t, dir)
	r.stop()
	if got, err := os.ReadFile(aside[0]); err != nil || !bytes.Equal(got, damaged) {
		t.Errorf("the file set aside holds %q (%v), want the damaged file", got, err)
	}
	got, err := pipeline.ReadDowntimes(path)
	if err != nil {
		t.Fatal(err)
	}
	sameDowntimes(t, got, want)
}

// TestReadDowntimes_Damaged: a reader of the data directory (mcpaudit
// timeline --data-dir) given a state file damaged after its downtimes gets
// them with an error that says where it went wrong.
func TestReadDowntimes_Damaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "partitions.json")
	content := `{"version":2,"saved":"2026-12-07T01:00:00Z","downtimes":[{"from":"2026-12-07T00:00:00Z","to":"2026-12-07T00:01:00Z","end":"crash"}],"partitions":[{"tenant":"","ser`
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	ds, err := pipeline.ReadDowntimes(path)
	if err == nil || !strings.Contains(err.Error(), "field partitions[0]") || !strings.Contains(err.Error(), "byte ") {
		t.Errorf("error %v, want one naming the field and byte at fault", err)
	}
	if len(ds) != 1 || ds[0].End != "crash" {
		t.Errorf("downtimes %v, want the one read whole", ds)
	}
}

// TestRestart_RemovesTempsOfKilledSave: a run killed while it saved its
// state file (between the temporary file's creation and its rename) leaves
// the temporary file; the next start removes it and reads the state file,
// which is the old one whole. Before adv46 each such crash left one more,
// as large as the state file, for good.
func TestRestart_RemovesTempsOfKilledSave(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	savedRunning(t, dir)
	r.crash()
	// What kill -9 leaves mid-save: a temporary file written in part.
	// Those of the state file and of a counters' journal
	// (datadir.WriteFileSynced's), and one of a version before it.
	lefts := []string{filepath.Join(dir, ".partitions.json.1234567.tmp"), filepath.Join(dir, ".partitions.counts.b.7654321.tmp"),
		filepath.Join(dir, ".partitions-1234567")}
	for _, left := range lefts {
		if err := os.WriteFile(left, []byte(`{"version":2,"sav`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	clock.Add(time.Minute)
	r = openRun(t, dir, clock, nil, nil)
	for _, left := range lefts {
		if _, err := os.Stat(left); err == nil {
			t.Errorf("the temporary file %s of a killed save is still there", left)
		}
	}
	if !strings.Contains(r.logs.String(), "files=3") {
		t.Errorf("the start does not say it removed three files:\n%s", r.logs.String())
	}
	if aside, _ := filepath.Glob(filepath.Join(dir, "partitions.json.bad-*")); len(aside) != 0 {
		t.Errorf("the state file was set aside (%v): it was whole", aside)
	}
	if d := r.p.Downtimes(); len(d) != 1 || d[0].End != "crash" {
		t.Errorf("Downtimes = %v, want the crash", d)
	}
}
