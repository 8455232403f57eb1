package pipeline_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
)

// TestRestart_LaggingSourceHoldsPartition: pod-1 of thegram is an active
// source 3 min behind pod-0 (an active source holds its partition back).
// None of its calls is late before a restart, nor after one: the state
// file keeps the sources that held each partition, restored before the
// replay, so the replay's clock does not take the watermark to pod-0's
// time while pod-1's exporter backs off for 5 s.
func TestRestart_LaggingSourceHoldsPartition(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	rpc := 0
	var stepFrom func(r *run, n, pod1From int)
	step := func(r *run, n int) { stepFrom(r, n, 0) }
	stepFrom = func(r *run, n, pod1From int) {
		for i := 0; i < n; i++ {
			rpc++
			now := clock.Now()
			if _, err := r.ingest(batch(t, "pod-0", callLine("thegram", "s0", rpc, now.Add(-time.Second)))); err != nil {
				t.Fatal(err)
			}
			if i >= pod1From {
				if _, err := r.ingest(batch(t, "pod-1", callLine("thegram", "s1", rpc, now.Add(-3*time.Minute)))); err != nil {
					t.Fatal(err)
				}
			}
			clock.Add(time.Second)
		}
	}
	r := openRun(t, dir, clock, nil, nil)
	step(r, 30)
	st := r.status()[detect.PartitionKey{Server: "thegram"}]
	t.Logf("before restart: wm %s late %d too late %d", st.Watermark.Format(time.TimeOnly), st.Late, st.TooLate)
	if st.TooLate != 0 {
		t.Fatalf("too late before the restart: %d", st.TooLate)
	}
	r.stop()
	clock.Add(time.Second)
	r = openRun(t, dir, clock, nil, nil)
	stepFrom(r, 30, 5) // pod-1's exporter backs off 5 s after the connection errors
	st = r.status()[detect.PartitionKey{Server: "thegram"}]
	t.Logf("after restart: wm %s late %d too late %d", st.Watermark.Format(time.TimeOnly), st.Late, st.TooLate)
	if st.TooLate != 0 {
		t.Errorf("after a clean restart %d acknowledged calls of the lagging source were too late to be judged", st.TooLate)
	}
}

// TestPause_LaggingSource is the control: the same 5 s pause of pod-1
// without a restart.
func TestPause_LaggingSource(t *testing.T) {
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, nil, nil)
	rpc := 0
	for i := 0; i < 60; i++ {
		rpc++
		now := clock.Now()
		if _, err := r.ingest(batch(t, "pod-0", callLine("thegram", "s0", rpc, now.Add(-time.Second)))); err != nil {
			t.Fatal(err)
		}
		if i < 30 || i >= 35 {
			if _, err := r.ingest(batch(t, "pod-1", callLine("thegram", "s1", rpc, now.Add(-3*time.Minute)))); err != nil {
				t.Fatal(err)
			}
		}
		clock.Add(time.Second)
	}
	st := r.status()[detect.PartitionKey{Server: "thegram"}]
	t.Logf("no restart: wm %s late %d too late %d", st.Watermark.Format(time.TimeOnly), st.Late, st.TooLate)
	if st.TooLate != 0 {
		t.Errorf("too late: %d", st.TooLate)
	}
}

func readSyncedLine(session string, rpc int, t time.Time, path string) []byte {
	return fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":%q,"request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":%q}}},"response":{"jsonrpc":"2.0","id":%d,"result":{"isError":false,"structuredContent":{"path":%q,"rev":4,"hash":"bb","sync":{"state":"synced"},"text":"..."}}}}`,
		t.Format(time.RFC3339Nano), session, rpc, path, rpc, path)
}

// TestRestart_LaggingSourceWriteSettled: pod-1 (90 s behind, active, within the
// allowed lateness) writes with sync pending at P and reads it synced at
// P+4m50s. Without a restart the write is durable. With a restart at
// wall P+5m30s (pod-1 back 5 s later, its exporter backing off), the
// write stays durable: the window is not closed by the replay's clock
// before pod-1 delivers the read (which gave a false unverified_write
// before the sources were kept).
func TestRestart_LaggingSourceWriteSettled(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprint("restart=", restart), func(t *testing.T) {
			onlyOnceUnderRace(t, restart)
			dir := t.TempDir()
			clock := newClock(wallStart)
			r := openRun(t, dir, clock, nil, nil)
			P := wallStart.Add(-90 * time.Second)
			rpc := 0
			wrote, read := false, false
			for i := 0; i < 600; i++ {
				now := clock.Now()
				if restart && i == 250 {
					r.stop()
					r = openRun(t, dir, clock, nil, nil)
				}
				rpc++
				if _, err := r.ingest(batch(t, "pod-0", callLine("thegram", "s0", rpc, now.Add(-time.Second)))); err != nil {
					t.Fatal(err)
				}
				if !restart || i < 250 || i >= 255 {
					t1 := now.Add(-90 * time.Second)
					lines := [][]byte{callLine("thegram", "s1", rpc, t1)}
					if !wrote && !t1.Before(P) {
						lines = append(lines, pendingPatchLine("s1", 100000, P, "team/x.gram"))
						wrote = true
					}
					if !read && !t1.Before(P.Add(4*time.Minute+50*time.Second)) {
						lines = append(lines, readSyncedLine("s1", 100001, P.Add(4*time.Minute+50*time.Second), "team/x.gram"))
						read = true
					}
					if _, err := r.ingest(batch(t, "pod-1", lines...)); err != nil {
						t.Fatal(err)
					}
				}
				clock.Add(time.Second)
			}
			o := r.stop()
			st := o.writes
			for k, s := range st {
				t.Logf("write %s: %s", k, s)
			}
			for _, f := range o.findings {
				t.Errorf("finding %s %s %v", f.Kind, f.Document, f.Calls)
			}
		})
	}
}

// TestRestart_SourceBackWithinGrace: as TestRestart_LaggingSourceHoldsPartition,
// but pod-1's exporter comes back 20 s after the restart, past the idle
// timeout (10 s): the restored source still holds the partition for the
// restart grace (30 s), so none of its calls is late. The control, with
// no grace, shows what the grace prevents.
func TestRestart_SourceBackWithinGrace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		late  bool
	}{{"default grace", pipeline.NewDefaultConfig().RestartGrace, false}, {"no grace", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock(wallStart)
			edit := func(c *pipeline.Config) { c.RestartGrace = tc.grace }
			rpc := 0
			step := func(r *run, n, pod1From int) {
				for i := 0; i < n; i++ {
					rpc++
					now := clock.Now()
					if _, err := r.ingest(batch(t, "pod-0", callLine("thegram", "s0", rpc, now.Add(-time.Second)))); err != nil {
						t.Fatal(err)
					}
					if i >= pod1From {
						if _, err := r.ingest(batch(t, "pod-1", callLine("thegram", "s1", rpc, now.Add(-3*time.Minute)))); err != nil {
							t.Fatal(err)
						}
					}
					clock.Add(time.Second)
				}
			}
			r := openRun(t, dir, clock, edit, nil)
			step(r, 30, 0)
			r.stop()
			clock.Add(time.Second)
			r = openRun(t, dir, clock, edit, nil)
			step(r, 40, 20)
			st := r.status()[detect.PartitionKey{Server: "thegram"}]
			t.Logf("late %d too late %d", st.Late, st.TooLate)
			if got := st.Late+st.TooLate > 0; got != tc.late {
				t.Errorf("%d calls late and %d too late after the restart; want late: %v", st.Late, st.TooLate, tc.late)
			}
		})
	}
}

// TestRefused_SourcesHoldPartition: the store is unreachable for 20 s
// (longer than the idle timeout); both pods of thegram retry every second
// and are refused, then deliver their backlog. A refused source is not
// quiet: the partition waits for pod-1, 3 min behind, instead of moving on
// at the wall clock's pace from pod-0's time, which would make pod-1's
// backlog late (and close verification windows without its calls).
func TestRefused_SourcesHoldPartition(t *testing.T) {
	clock := newClock(wallStart)
	r := openRun(t, t.TempDir(), clock, nil, nil)
	var backlog [2][][]byte
	rpc := 0
	for i := 0; i < 60; i++ {
		rpc++
		now := clock.Now()
		backlog[0] = append(backlog[0], callLine("thegram", "s0", rpc, now.Add(-time.Second)))
		backlog[1] = append(backlog[1], callLine("thegram", "s1", rpc, now.Add(-3*time.Minute)))
		down := i >= 20 && i < 40
		r.cs.failAppend.Store(down)
		for pod := range backlog {
			_, err := r.ingest(batch(t, fmt.Sprintf("pod-%d", pod), backlog[pod]...))
			if down != (err != nil) {
				t.Fatalf("second %d, pod-%d: store down %v, ingest error %v", i, pod, down, err)
			}
			if err == nil {
				backlog[pod] = nil
			}
		}
		clock.Add(time.Second)
	}
	st := r.status()[detect.PartitionKey{Server: "thegram"}]
	if st.Late+st.TooLate > 0 {
		t.Errorf("after the outage %d calls were late and %d too late", st.Late, st.TooLate)
	}
}

// TestRestart_SourceLastSeen: a source restored from the state file shows
// the wall time of its last delivery before the restart as last_seen (the
// file keeps it), not the zero time; one of a state file written before it
// was kept shows none (the zero time, omitted by the API) until it delivers.
func TestRestart_SourceLastSeen(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRun(t, dir, clock, nil, nil)
	for i := range 3 {
		if _, err := r.ingest(batch(t, "pod-1", callLine("thegram", "s1", i+1, clock.Now().Add(-time.Minute)))); err != nil {
			t.Fatal(err)
		}
		clock.Add(time.Second)
	}
	seen := clock.Now().Add(-time.Second)
	r.stop()
	clock.Add(10 * time.Second)
	lastSeen := func(r *run) time.Time {
		t.Helper()
		for _, s := range r.status()[detect.PartitionKey{Server: "thegram"}].Sources {
			if s.Name == "pod-1" {
				return s.LastSeen
			}
		}
		t.Fatalf("pod-1 not restored: %+v", r.status())
		return time.Time{}
	}
	r = openRun(t, dir, clock, nil, nil)
	if got := lastSeen(r); !got.Equal(seen) {
		t.Errorf("restored pod-1 last seen %s, want %s, its last delivery before the restart", got, seen)
	}
	r.stop()

	// A state file of an earlier release has no "seen": unknown, zero.
	path := filepath.Join(dir, "partitions.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old := regexp.MustCompile(`,"seen":"[^"]*"`).ReplaceAll(b, nil)
	if bytes.Equal(old, b) {
		t.Fatalf("no seen in %s", b)
	}
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	r = openRun(t, dir, clock, nil, nil)
	defer r.stop()
	if got := lastSeen(r); !got.IsZero() {
		t.Errorf("pod-1 restored from a file without seen: last seen %s, want unknown (zero)", got)
	}
}
