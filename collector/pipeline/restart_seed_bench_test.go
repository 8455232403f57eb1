package pipeline_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// BenchmarkRestart_FreedStraddle times a restart (pipeline.New: the
// replay) over a store holding a freed partition whose calls straddle the
// state file's floor (a neighbour's poster 90 minutes slow holds it back):
// 20,000 calls of it in the hour before the floor, which the replay passes
// over (main) or replays silently because a call of it from the floor on
// is judged (freed15), and the neighbour's calls. One op is one restart.
var seededLog = regexp.MustCompile(`freed_calls_seeded=(\d+)`)

func BenchmarkRestart_FreedStraddle(b *testing.B) {
	const covered = 20_000
	tmpl := b.TempDir()
	clock := newClock(wallStart)
	key := detect.PartitionKey{Server: "thegram"}
	r := openRun(b, tmpl, clock, nil, nil)
	rpc := 100_000
	other := func() {
		rpc++
		if _, err := r.ingest(batch(b, "lagging", callLine("other", "o1", rpc, clock.Now().Add(-90*time.Minute)))); err != nil {
			b.Fatal(err)
		}
	}
	other()
	// The covered calls: reads of thegram over 59 minutes before wallStart - 3m
	// (the floor will be about wallStart - 1m), in batches of 500.
	from := wallStart.Add(-62 * time.Minute)
	for i := 0; i < covered; i += 500 {
		var lines [][]byte
		for j := i; j < i+500; j++ {
			lines = append(lines, callLine("thegram", "s1", j+1, from.Add(time.Duration(j)*(59*time.Minute/covered))))
		}
		if _, err := r.ingest(batch(b, "poster", lines...)); err != nil {
			b.Fatal(err)
		}
	}
	r.steps(50, other)
	if _, err := r.ingest(batch(b, "poster", pendingPatchLine("s2", 2, clock.Now().Add(-time.Second), "team/b.gram"))); err != nil {
		b.Fatal(err)
	}
	var wm time.Time
	for deadline := time.Now().Add(60 * time.Second); wm.IsZero(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the state file does not keep thegram freed")
		}
		r.steps(1, other)
		for _, l := range readState(b, tmpl).Freed {
			if l.Tenant == key.Tenant && l.Server == key.Server {
				wm = l.Watermark
			}
		}
	}
	r.steps(2, other)
	floor := readState(b, tmpl).Floor
	if floor.IsZero() || !floor.After(from.Add(59*time.Minute)) || floor.After(wm) {
		b.Fatalf("floor %v, freed at %v: want the covered calls before the floor, the floor before the freed watermark", floor, wm)
	}
	r.stop()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), "data")
		if err := os.CopyFS(dir, os.DirFS(tmpl)); err != nil {
			b.Fatal(err)
		}
		c := newClock(clock.Now().Add(time.Second))
		b.StartTimer()
		r := openRun(b, dir, c, nil, nil)
		b.StopTimer()
		// The calls replayed silently, as logged (none on a build that
		// passes them over).
		if m := seededLog.FindStringSubmatch(r.logs.String()); m != nil {
			n, _ := strconv.Atoi(m[1])
			b.ReportMetric(float64(n), "seeded")
		}
		r.stop()
		b.StartTimer()
	}
}
