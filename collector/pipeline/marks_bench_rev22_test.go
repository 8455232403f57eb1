package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// BenchmarkSaveMarks_NewPartitions (rev22) times the state file's save
// after a commit (saveMarks, called every commit_every, 100 ms by
// default) with 1,000 partitions whose watermarks move at each commit:
// steady (no partition new) and under a stream of new partitions (one
// gets its first watermark at each commit: new tenants or servers, or
// partitions freed as idle coming back). Before fl22a the file was
// written at most once a second; since, a first watermark writes it at
// once, so a stream of new partitions writes it (1,000 partitions,
// a file sync and a directory sync) at every commit. writes/op is the
// share of commits that wrote the file. A real file on the test's disk.
func BenchmarkSaveMarks_NewPartitions(b *testing.B) {
	for _, stream := range []bool{false, true} {
		b.Run(fmt.Sprintf("new_each_commit=%v", stream), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "partitions.json")
			t := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
			p := &Pipeline{cfg: Config{StateFile: path}, now: func() time.Time { return t }}
			marks := map[detect.PartitionKey]mark{}
			for i := range 1000 {
				marks[detect.PartitionKey{Tenant: "t", Server: fmt.Sprint("s", i)}] = mark{Watermark: t.Add(-time.Minute)}
			}
			p.saveMarks(marks, true)
			writes := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t = t.Add(100 * time.Millisecond)
				next := make(map[detect.PartitionKey]mark, len(marks)+1)
				for k, m := range marks {
					m.Watermark = t.Add(-time.Minute)
					next[k] = m
				}
				if stream {
					// A partition's first watermark; the oldest new one
					// goes (freed), the count stays 1,000.
					next[detect.PartitionKey{Tenant: "t", Server: fmt.Sprint("new", i)}] = mark{Watermark: t.Add(-time.Minute)}
					delete(next, detect.PartitionKey{Tenant: "t", Server: fmt.Sprint("s", i)})
					delete(next, detect.PartitionKey{Tenant: "t", Server: fmt.Sprint("new", i-1000)})
				}
				before := p.marksSaved
				p.saveMarks(next, false)
				if !p.marksSaved.Equal(before) {
					writes++
				}
				marks = next
			}
			b.ReportMetric(float64(writes)/float64(b.N), "writes/op")
			if _, err := os.Stat(path); err != nil {
				b.Fatal(err)
			}
		})
	}
}
