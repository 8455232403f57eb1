package pipeline_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
)

// BenchmarkIngest_Sequential512 times what one sequential exporter waits
// for at each request of 512 calls (issue 9): Ingest into the SQLite
// store with its calls in the call logs (serve.sqlite.calls: log), from
// the call to its return, when the caller may acknowledge. One op is one
// request; ack-p50-ms and ack-p99-ms are its quantiles. The engine judges
// the calls meanwhile on the other goroutines, as in serve. Each call is
// a new id; a fifth are pending gram_patch writes.
//
//	go test -run '^$' -bench Ingest_Sequential512 -benchtime 200x -count 3 ./collector/pipeline/
func BenchmarkIngest_Sequential512(b *testing.B) {
	const batchCalls = 512
	dir := b.TempDir()
	logs, err := calllogs.Open(filepath.Join(dir, "calls"), calllog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	clock := newClock(wallStart)
	r := openRunWith(b, dir, clock, func(c *pipeline.Config) {
		c.QueueCalls = 1 << 30
		c.MaxOpenCalls = 1 << 30
	}, nil, nil, nil, sqlite.Options{Synchronous: "normal", Calls: sqlite.CallsLog, CallLog: logs})
	batches := make([]audit.Batch, b.N)
	for i := range batches {
		lines := make([][]byte, batchCalls)
		for j := range lines {
			n := i*batchCalls + j
			at := wallStart.Add(time.Duration(n) * time.Millisecond)
			session := fmt.Sprint("s", n%97)
			if j%5 == 0 {
				lines[j] = pendingPatchLine(session, n, at, fmt.Sprintf("team/doc-%d.gram", n%1009))
			} else {
				lines[j] = callLine("thegram", session, n, at)
			}
		}
		batches[i] = batch(b, "exporter", lines...)
	}
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range batches {
		start := time.Now()
		if _, err := r.p.Ingest(context.Background(), batches[i]); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(start)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "ack-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "ack-p99-ms")
}
