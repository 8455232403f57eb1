package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// BenchmarkIngest_Comebacks times the acknowledgement of one call of each
// of 50 servers whose partitions were freed as idle, another server
// (its poster's clock 15 minutes slow) holding the state file's floor
// behind them: what a quiet system's servers cost when their traffic
// starts again (review12c's D3 measured a state-file write at each).
// The 50 acknowledgements are one op.
func BenchmarkIngest_Comebacks(b *testing.B) {
	const servers = 50
	dir := b.TempDir()
	clock := newClock(wallStart)
	r := openRun(b, dir, clock, nil, nil)
	rpc := 0
	send := func(server string, at time.Time) {
		rpc++
		if _, err := r.p.Ingest(context.Background(), batch(b, "poster-"+server, callLine(server, "s", rpc, at))); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for j := range servers {
			send(fmt.Sprint("s", j), clock.Now())
		}
		// Quiet until every server's partition is freed; the lagging one
		// keeps sending.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			send("other", clock.Now().Add(-15*time.Minute))
			st := r.status()
			if _, ok := st[detect.PartitionKey{Server: "s0"}]; !ok && len(st) == 1 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("the servers' partitions were never freed: %d left", len(st))
			}
			clock.Add(30 * time.Second)
		}
		// The file is written at most once a second: once it keeps them
		// (none before freed partitions were kept). Every build waits the
		// same 2 s, so that what the collector does meanwhile (a store
		// checkpoint) is alike before the timed part.
		clock.Add(time.Second)
		freed := 0
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			freed = len(readState(b, dir).Freed)
		}
		b.ReportMetric(float64(freed), "freed")
		b.StartTimer()
		for j := range servers {
			send(fmt.Sprint("s", j), clock.Now())
		}
	}
}
