package pipeline

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestSaveMarks_BackWithinSecond (rev22, review of fl22a): a partition
// freed as idle and brought back within a second of the state file's last
// save. The file still holds the old partition's watermark (the save
// after the freeing was put off, and a comeback writes the marks last
// saved), so fl22a's firstMark took the new partition's first watermark
// for a later one and put its save off up to a second: the file said the
// partition's output was committed up to the old watermark while the new
// partition had committed only up to an earlier one (its calls, sent
// again or from a lagging source, dated before where it was freed). A
// crash in that second leaves a mark ahead of the store's output, the
// case fl22a wrote the first mark at once for. Here saveMarks is called
// directly on a real file; the engine's making such a watermark after a
// comeback is not shown end to end (no time left in rev22).
func TestSaveMarks_BackWithinSecond(t *testing.T) {
	path := filepath.Join(t.TempDir(), "partitions.json")
	now := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	p := &Pipeline{cfg: Config{StateFile: path}, now: func() time.Time { return now }}
	k := detect.PartitionKey{Tenant: "t", Server: "thegram"}
	other := detect.PartitionKey{Tenant: "t", Server: "other"}
	old := now.Add(-time.Minute)
	p.saveMarks(map[detect.PartitionKey]mark{k: {Watermark: old}, other: {Watermark: old}}, true)
	// Freed as idle 200 ms later: the save is put off (within the second).
	now = now.Add(200 * time.Millisecond)
	p.saveMarks(map[detect.PartitionKey]mark{other: {Watermark: old}}, false)
	// Back 200 ms later, its first watermark before where it was freed.
	now = now.Add(200 * time.Millisecond)
	back := old.Add(-20 * time.Second)
	p.saveMarks(map[detect.PartitionKey]mark{k: {Watermark: back}, other: {Watermark: old}}, false)
	marks, _, _, _, _, _ := readMarks(path, time.Now(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if got := marks[k].Watermark; !got.Equal(back) {
		t.Errorf("the state file has the partition brought back at %v, want its first watermark %v written at once (the old partition's, ahead of what the new one committed)", got, back)
	}
}
