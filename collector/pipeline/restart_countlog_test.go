package pipeline_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// countLogRun is the first run of the tests of the counters' journal: two
// calls judged and saved (the state file then is returned as old), then
// two more after the mark, the first judged (the second moves the
// watermark past it) and counted.
func countLogRun(t *testing.T, dir string, clock *testClock) (r *run, reg *prometheus.Registry, old []byte) {
	t.Helper()
	r, reg = countedRun(t, dir, clock)
	mark, old := savedFirst(t, r, dir, callLine("thegram", "s-1", 1, wallStart.Add(-5*time.Minute)), callLine("thegram", "s-1", 2, wallStart.Add(-20*time.Second)))
	if _, err := r.ingest(batch(t, "calls:a", callLine("thegram", "s-1", 3, mark.Add(time.Second)), callLine("thegram", "s-1", 4, mark.Add(5*time.Second)))); err != nil {
		t.Fatal(err)
	}
	return r, reg, old
}

// countedOnce restarts over dir, judges every stored call (the clock
// moved 4 minutes on) and checks that the calls counter of thegram shows
// want once a save holds its counts: each call counted once.
func countedOnce(t *testing.T, dir string, clock *testClock, want float64) {
	t.Helper()
	r, reg := countedRun(t, dir, clock)
	r.steps(8, nil)
	r.saved()
	r.steps(1, nil)
	r.saved()
	if got := callsValue(t, reg, "thegram"); got != want {
		t.Errorf("after the restart the calls counter shows %v, want %v (each call once)", got, want)
	}
	r.stop()
}

// TestRestart_CountLogKill9BetweenWrites (cnt50): the counters' values
// are appended to their journal, then the state file is written with the
// marks. A serve process killed (kill -9, a real one: the test runs itself
// as a child) between the two leaves a journal whose last record is past
// the one the state file names. The restart begins the counters at the
// record the state file names, not the last one, and counts again what
// its replay judges after the marks: every call counted once, 4. Taking
// the last record would count the call judged after the mark twice (its
// count is in that record, and the replay counts it again).
func TestRestart_CountLogKill9BetweenWrites(t *testing.T) {
	const env = "MCPAUDIT_TEST_COUNTLOG_CHILD"
	if dir := os.Getenv(env); dir != "" {
		r, _, _ := countLogRun(t, dir, newClock(wallStart))
		state := filepath.Join(dir, "partitions.json")
		defer pipeline.SetCountsSaved(func() {
			// Killed once the journal holds a record the state file does
			// not name yet.
			file, seq, err := pipeline.CountLogOf(state)
			if err != nil || file == "" {
				return
			}
			seqs, _, err := pipeline.CountLogRecords(filepath.Join(dir, file))
			if err == nil && len(seqs) > 0 && seqs[len(seqs)-1] > seq {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		})()
		for range 5 {
			r.steps(1, nil)
			r.saved()
		}
		t.Fatal("not killed between the journal's append and the state file's write")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRestart_CountLogKill9BetweenWrites$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env+"="+dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child was not killed by SIGKILL (%v):\n%s", err, out)
	}
	file, seq, err := pipeline.CountLogOf(filepath.Join(dir, "partitions.json"))
	if err != nil || file == "" {
		t.Fatalf("the state file names no counters' journal (%v)", err)
	}
	seqs, _, err := pipeline.CountLogRecords(filepath.Join(dir, file))
	if err != nil || len(seqs) == 0 || seqs[len(seqs)-1] != seq+1 {
		t.Fatalf("journal %s holds records %v (%v); the state file names %d: want one more", file, seqs, err, seq)
	}
	countedOnce(t, dir, newClock(wallStart.Add(time.Minute)), 4)
}

// TestCountLog_TornTail (cnt50): a save cut off by a crash leaves the
// journal's last record cut short at any byte, and the state file naming
// the record before. Cut at every byte of its last record, the journal
// gives the values of the records the state file names, those of the whole
// file; and it gives no values for a state file that names the cut record
// (the restart then starts the counters at 0, as from a file without
// them, rather than from values the marks do not go with). A restart from
// a few of those cuts counts every call once.
func TestCountLog_TornTail(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r, _, old := countLogRun(t, dir, clock)
	r.steps(1, nil)
	r.saved()
	state := filepath.Join(dir, "partitions.json")
	file, seq, err := pipeline.CountLogOf(state)
	if err != nil || file == "" {
		t.Fatalf("the state file names no counters' journal (%v)", err)
	}
	r.crash()
	whole, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	seqs, offs, err := pipeline.CountLogRecords(filepath.Join(dir, file))
	if err != nil || len(seqs) < 2 || seqs[len(seqs)-1] != seq {
		t.Fatalf("journal records %v (%v), the state file names %d: want it the last of two or more", seqs, err, seq)
	}
	last := offs[len(offs)-1]
	newState, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, old, 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := pipeline.ReadCountLog(state)
	if err != nil {
		t.Fatal(err)
	}
	for cut := last; cut <= len(whole); cut++ {
		if err := os.WriteFile(filepath.Join(dir, file), whole[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(state, old, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := pipeline.ReadCountLog(state)
		if err != nil || !slices.EqualFunc(got, want, func(a, b json.RawMessage) bool { return string(a) == string(b) }) {
			t.Fatalf("cut at byte %d of %d (record at %d): %d values (%v), want the %d the state file names", cut, len(whole), last, len(got), err, len(want))
		}
		if err := os.WriteFile(state, newState, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err = pipeline.ReadCountLog(state)
		if cut < len(whole) && err == nil {
			t.Fatalf("cut at byte %d of %d, the state file naming the cut record: %d values, want an error", cut, len(whole), len(got))
		}
		if cut == len(whole) && (err != nil || len(got) != len(want)+1) {
			t.Fatalf("whole, the state file naming its last record: %d values (%v), want %d", len(got), err, len(want)+1)
		}
	}
	for _, cut := range []int{last, last + 1, last + 8, last + 24, (last + len(whole)) / 2, len(whole) - 1} {
		t.Run(fmt.Sprintf("cut=%dB", cut-last), func(t *testing.T) {
			d := t.TempDir()
			copyDir(t, dir, d)
			if err := os.WriteFile(filepath.Join(d, file), whole[:cut], 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, "partitions.json"), old, 0o644); err != nil {
				t.Fatal(err)
			}
			countedOnce(t, d, newClock(wallStart.Add(time.Minute)), 4)
		})
	}
}

// copyDir copies the files of dir src into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	es, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRestart_CountLogCompacted (cnt50): once the journal's deltas
// outgrow the snapshot (here from 1 byte on), a save writes a new journal
// to the other file, and the state file names it once it is written; a
// crash and a restart after several such turns count every call once.
func TestRestart_CountLogCompacted(t *testing.T) {
	defer pipeline.SetCompactAfter(1)()
	dir := t.TempDir()
	clock := newClock(wallStart)
	r, _, _ := countLogRun(t, dir, clock)
	state := filepath.Join(dir, "partitions.json")
	files := map[string]bool{}
	at := wallStart
	for i := range 6 {
		at = at.Add(30 * time.Second)
		if _, err := r.ingest(batch(t, "calls:a", callLine("thegram", "s-1", 10+i, at))); err != nil {
			t.Fatal(err)
		}
		r.steps(1, nil)
		r.saved()
		file, _, err := pipeline.CountLogOf(state)
		if err != nil {
			t.Fatal(err)
		}
		files[file] = true
	}
	if len(files) != 2 {
		t.Fatalf("the state file named the journals %v, want both", files)
	}
	r.crash()
	countedOnce(t, dir, newClock(clock.Now()), 10)
}

// TestRestart_CountersOfRcn49File (cnt50): a state file of rcn49's
// release keeps the counters' values in it (member "counters", no
// journal): a start begins the counters there, and its first save names a
// journal; a journal of another id than the one named (another state
// file's, or an earlier run's) is not taken: the counters start at 0 and
// the replay counts as from a file without them, with a warning.
func TestRestart_CountersOfRcn49File(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r, _ := countedRun(t, dir, clock)
	if _, err := r.ingest(batch(t, "calls:a", callLine("thegram", "s-1", 1, wallStart.Add(-5*time.Minute)), callLine("thegram", "s-1", 2, wallStart.Add(-3*time.Minute)))); err != nil {
		t.Fatal(err)
	}
	r.steps(8, nil)
	r.saved()
	state := filepath.Join(dir, "partitions.json")
	values, err := pipeline.ReadCountLog(state)
	if err != nil {
		t.Fatal(err)
	}
	r.stop()
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RestoreCounts(values...); err != nil {
		t.Fatal(err)
	}
	full, _ := m.SaveCounts(true)
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	logRef := f["counters_log"]
	delete(f, "counters_log")
	f["counters"] = full
	rcn49, _ := json.Marshal(f)
	if err := os.WriteFile(state, rcn49, 0o644); err != nil {
		t.Fatal(err)
	}
	r2, reg2 := countedRun(t, dir, clock)
	r2.steps(1, nil)
	r2.saved()
	if got := callsValue(t, reg2, "thegram"); got != 2 {
		t.Errorf("started from rcn49's file, the calls counter shows %v, want 2", got)
	}
	if file, _, err := pipeline.CountLogOf(state); err != nil || file == "" {
		t.Errorf("after a save from rcn49's file the state file names no journal (%v)", err)
	}
	r2.stop()

	// Another id.
	b, err = os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	f = nil
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var ref map[string]any
	if err := json.Unmarshal(logRef, &ref); err != nil {
		t.Fatal(err)
	}
	ref["id"] = "bad1d"
	f["counters_log"], _ = json.Marshal(ref)
	other, _ := json.Marshal(f)
	if err := os.WriteFile(state, other, 0o644); err != nil {
		t.Fatal(err)
	}
	r3, reg3 := countedRun(t, dir, clock)
	r3.steps(1, nil)
	r3.saved()
	t.Logf("started from a state file naming a journal of another id, the calls counter shows %v (what the replay counts)", callsValue(t, reg3, "thegram"))
	if !strings.Contains(r3.logs.String(), "counters cannot be read") {
		t.Errorf("no warning for the journal of another id:\n%s", r3.logs.String())
	}
	r3.stop()
}
