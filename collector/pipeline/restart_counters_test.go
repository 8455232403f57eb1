package pipeline_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// integrityLine is a gram_patch refused with E_INTEGRITY: an
// integrity_failure finding as soon as it is judged.
func integrityLine(session string, rpc int, t time.Time, path string) []byte {
	return fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":%q,"request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_patch","arguments":{"path":%q,"base_revision":9,"expected_hash":"cb","request_id":"req-i%d","operations":[{"op":"append_block","target":"h1","text":"x"}]}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":true,"structuredContent":{"error":{"code":"E_INTEGRITY","message":"History sequence audit failed at r9"}}}}}`,
		t.Format(time.RFC3339Nano), session, rpc, path, rpc, rpc)
}

// countedRun is a run whose sinks include a real metrics sink that is
// also its Config.Counters.
func countedRun(t *testing.T, dir string, clock *testClock) (*run, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{Servers: []string{"thegram"}})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	rec.also = []audit.Sink{m}
	r := openRun(t, dir, clock, func(c *pipeline.Config) { c.Counters = m }, rec)
	return r, reg
}

// savedFirst ingests lines into r (over dir), judges and saves them, and
// returns thegram's saved mark and the state file then.
func savedFirst(t *testing.T, r *run, dir string, lines ...[]byte) (mark time.Time, state []byte) {
	t.Helper()
	if _, err := r.ingest(batch(t, "calls:a", lines...)); err != nil {
		t.Fatal(err)
	}
	r.steps(1, nil)
	r.saved()
	mark = thegramMark(t, dir)
	if mark.IsZero() {
		t.Fatal("no mark saved")
	}
	state, err := os.ReadFile(filepath.Join(dir, "partitions.json"))
	if err != nil {
		t.Fatal(err)
	}
	return mark, state
}

// thegramMark returns the watermark of thegram's partition in the state file
// of dir (zero when none).
func thegramMark(t *testing.T, dir string) time.Time {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "partitions.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Partitions []struct {
			Server    string    `json:"server"`
			Watermark time.Time `json:"watermark"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Partitions {
		if p.Server == "thegram" {
			return p.Watermark
		}
	}
	return time.Time{}
}

// TestRestart_FindingCountedAfterUnsavedCrash: a finding judged after the
// last save of the state file, committed and counted, then lost with the
// process (the file as that save left it) is counted again by the restart,
// whose counters go on from the file's values: the replay makes it again
// after the saved mark, and the store holds it. From a file of a release
// before (no counters in it) the restart counts it no more, as before.
func TestRestart_FindingCountedAfterUnsavedCrash(t *testing.T) {
	for _, tc := range []struct {
		name       string
		keepValues bool
		want       float64
	}{
		{"file with the counters", true, 1},
		{"file of the release before", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock(wallStart)
			r, m := countedRun(t, dir, clock)
			mark, old := savedFirst(t, r, dir, callLine("thegram", "s-1", 1, wallStart.Add(-20*time.Second)))
			// The finding, after the mark: judged, committed, counted.
			if _, err := r.ingest(batch(t, "calls:a", integrityLine("s-1", 2, mark.Add(time.Second), "eng/i.gram"),
				callLine("thegram", "s-1", 3, mark.Add(5*time.Second)))); err != nil {
				t.Fatal(err)
			}
			r.steps(1, nil)
			r.saved()
			if got := findingsValue(t, m, "thegram", audit.KindIntegrityFailure); got != 1 {
				t.Fatalf("before the crash the counter shows %v, want 1", got)
			}
			stored := r.crash()
			if len(stored) != 1 {
				t.Fatalf("%d findings stored before the crash, want 1", len(stored))
			}
			// The crash came before the save that holds the finding.
			if !tc.keepValues {
				var f map[string]json.RawMessage
				if err := json.Unmarshal(old, &f); err != nil {
					t.Fatal(err)
				}
				if _, ok := f["counters_log"]; !ok {
					t.Fatalf("the state file names no counters' journal: %s", old)
				}
				delete(f, "counters_log")
				old, _ = json.Marshal(f)
			}
			if err := os.WriteFile(filepath.Join(dir, "partitions.json"), old, 0o644); err != nil {
				t.Fatal(err)
			}

			r2, m2 := countedRun(t, dir, clock)
			r2.steps(1, nil)
			r2.saved()
			if got := findingsValue(t, m2, "thegram", audit.KindIntegrityFailure); got != tc.want {
				t.Errorf("after the restart the counter shows %v, want %v", got, tc.want)
			}
			if n := len(openFindings(r2.stop())); n != 1 {
				t.Errorf("%d findings stored after the restart, want 1", n)
			}
		})
	}
}

// findingsValue returns the value of the findings series of server and
// kind that reg shows (0 when it has none).
func findingsValue(t *testing.T, reg *prometheus.Registry, server string, kind audit.Kind) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metrics.FindingsTotal {
			continue
		}
		for _, mt := range mf.GetMetric() {
			lv := map[string]string{}
			for _, l := range mt.GetLabel() {
				lv[l.GetName()] = l.GetValue()
			}
			if lv[metrics.LabelServer] == server && lv[metrics.LabelKind] == string(kind) {
				return mt.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// callsValue returns the sum of reg's ToolCallsTotal series of server.
func callsValue(t *testing.T, reg *prometheus.Registry, server string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != metrics.ToolCallsTotal {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == metrics.LabelServer && l.GetValue() == server {
					sum += mt.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// TestRestart_CallsCountedOnceAcrossUnsavedCrash: the calls counter goes
// on across a crash that came after calls were judged, committed and
// counted past the last save of the state file (the file as that save
// left it): the restart begins it at the saved value, counts again the
// call judged after the saved mark, whose count died with the process,
// and not the one before the mark that the replay judges again (within
// allowed_lateness + lateness of it). Before rcn49 the counter started at
// 0 and the replay counted the calls of that span again: 3 where 4 were
// judged (the first, older than the span, lost); with the replay counting
// every call it judges again on top of the saved value, 5.
func TestRestart_CallsCountedOnceAcrossUnsavedCrash(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	r, m := countedRun(t, dir, clock)
	old1, old2 := wallStart.Add(-5*time.Minute), wallStart.Add(-20*time.Second)
	mark, old := savedFirst(t, r, dir, callLine("thegram", "s-1", 1, old1), callLine("thegram", "s-1", 2, old2))
	if !mark.After(old2) {
		t.Fatalf("mark %v, want one past the second call (%v)", mark, old2)
	}
	// A call after the mark, judged (a later one moves the watermark past
	// it), committed and counted; the crash comes before the save that
	// holds its count.
	if _, err := r.ingest(batch(t, "calls:a", callLine("thegram", "s-1", 3, mark.Add(time.Second)),
		callLine("thegram", "s-1", 4, mark.Add(5*time.Second)))); err != nil {
		t.Fatal(err)
	}
	r.steps(1, nil)
	r.saved()
	before := callsValue(t, m, "thegram")
	if before < 3 {
		t.Fatalf("before the crash the calls counter shows %v, want at least 3", before)
	}
	r.crash()
	if err := os.WriteFile(filepath.Join(dir, "partitions.json"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	r2, m2 := countedRun(t, dir, clock)
	r2.steps(1, nil)
	r2.saved()
	if got := callsValue(t, m2, "thegram"); got != before {
		t.Errorf("after the restart the calls counter shows %v, want %v as before the crash", got, before)
	}
	r2.stop()
}
