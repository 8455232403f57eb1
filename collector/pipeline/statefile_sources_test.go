package pipeline_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_StateFileSourcesOverBound: a state file that keeps more
// sources for a partition than detect.max_sources (100,000 delivering and
// 10 quiet, written with a larger bound) restores the first 1,000; the
// start says once, with the counts, what it did not restore one by one
// (the delivering ones held through the overflow source, the quiet ones
// dropped), and StateFileTrouble tells the status. Before adv46 it kept
// 1,000 and the overflow silently.
func TestRestart_StateFileSourcesOverBound(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	type src struct {
		Name    string        `json:"name"`
		Clock   time.Time     `json:"clock"`
		Seen    time.Time     `json:"seen"`
		Lag     time.Duration `json:"lag,omitempty"`
		HoldFor time.Duration `json:"hold_for,omitempty"`
	}
	now := clock.Now()
	srcs := make([]src, 100_000)
	for i := range srcs {
		srcs[i] = src{Name: fmt.Sprintf("pod-%06d", i), Clock: now.Add(-10 * time.Second), Seen: now.Add(-2 * time.Second)}
	}
	quiet := make([]src, 10)
	for i := range quiet {
		quiet[i] = src{Name: fmt.Sprintf("slow-%d", i), Clock: now.Add(-3 * time.Minute), Seen: now.Add(-time.Minute), Lag: 3 * time.Minute, HoldFor: 10 * time.Minute}
	}
	f := map[string]any{
		"version": 2, "store": "sqlite", "saved": now.Add(-time.Second), "run": "running",
		"partitions": []map[string]any{{"tenant": "", "server": "thegram", "watermark": now.Add(-20 * time.Second), "waiting": time.Time{},
			"at": now.Add(-time.Second), "sources": srcs, "quiet": quiet}},
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "partitions.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	r := openRun(t, dir, clock, nil, nil)
	logs := r.logs.String()
	if n := strings.Count(logs, "more sources per partition than detect.max_sources"); n != 1 {
		t.Errorf("said %d times, want once:\n%.2000s", n, logs)
	}
	for _, s := range []string{"partitions=1", "sources_in_file=100010", "restored=1000", "to_overflow=99000", "dropped=10", "max_sources=1000"} {
		if !strings.Contains(logs, s) {
			t.Errorf("the start-up log does not say %q:\n%.2000s", s, logs)
		}
	}
	tr := r.p.StateFileTrouble()
	if tr == nil || tr.SourcesInFile != 100_010 || tr.SourcesToOverflow != 99_000 || tr.SourcesDropped != 10 || tr.SetAside != "" {
		t.Errorf("StateFileTrouble = %+v, want 100,010 sources in the file, 99,000 to the overflow, 10 dropped, nothing set aside", tr)
	}
	st := r.status()[detect.PartitionKey{Server: "thegram"}]
	if len(st.Sources) > 1001 {
		t.Errorf("%d sources restored, want at most 1,000 and the overflow", len(st.Sources))
	}
}
