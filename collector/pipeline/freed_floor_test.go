package pipeline_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestFreed_ReplaySkipsOnlyBeforeFloor: the state file a crash leaves in the
// race TestFreed_AckedAroundTheFreeing covers (a late batch of thegram
// acknowledged, so stored and covered by the floor, then the engine frees
// thegram before taking it, and a save writes it freed with floor = the
// batch's time). The gate took a freed partition's output as committed
// only before the floor; the replay's skip first checked the freed
// watermark alone, so the stored, acknowledged, never-judged write
// was never judged and its unverified_write lost (found by review13h).
func TestFreed_ReplaySkipsOnlyBeforeFloor(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(wallStart)
	key := detect.PartitionKey{Server: "thegram"}
	r := openRun(t, dir, clock, nil, nil)
	t0 := wallStart.Add(-time.Minute)
	if _, err := r.ingest(batch(t, "poster", callLine("thegram", "s1", 1, t0))); err != nil {
		t.Fatal(err)
	}
	r.steps(40, nil)
	freeIdle(t, r, key)
	r.stop()

	path := filepath.Join(dir, "partitions.json")
	var f map[string]any
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	freed, _ := f["freed"].([]any)
	if len(freed) != 1 {
		t.Fatalf("file keeps no freed partition: %s", b)
	}
	wm, err := time.Parse(time.RFC3339Nano, freed[0].(map[string]any)["watermark"].(string))
	if err != nil {
		t.Fatal(err)
	}
	// The late batch: stored (acknowledged) and, in the race, queued when
	// the partition was freed; the save then wrote floor = its time.
	late := wm.Add(-6 * time.Minute)
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.Options{Synchronous: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	recs := decode(t, [][]byte{pendingPatchLine("s9", 9, late, "team/late.gram")})
	if _, err := st.AppendCalls(context.Background(), []audit.Record{*recs[0]}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	f["floor"] = late.Format(time.RFC3339Nano)
	b, _ = json.Marshal(f)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("state file: %s", b)

	clock.Add(time.Second)
	r = openRun(t, dir, clock, nil, nil)
	r.steps(40, nil)
	logs := r.logs.String()
	o := r.stop()
	found := 0
	for _, fd := range o.findings {
		if fd.Kind == audit.KindUnverifiedWrite {
			found++
		}
	}
	t.Logf("writes after restart: %v", o.writes)
	if found == 0 {
		t.Errorf("the acknowledged, never-judged late write (at %v, freed wm %v, floor %v) made no unverified_write after the restart; writes %v\n%s", late, wm, late, o.writes, logs)
	}
}
