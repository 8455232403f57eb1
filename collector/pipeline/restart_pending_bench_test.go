package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

var pendingRead = regexp.MustCompile(`read the writes stored pending.* writes=(\d+) .* took=(\S+)`)

// BenchmarkRestart_PendingWrites times a restart (pipeline.New: the
// replay) over a store holding 100,000 writes pending in the range a
// replayed call may settle (the marks less the lateness bounds and the
// verify window), one of which a replayed read settles, so that the gate
// reads the writes stored pending (gate.storedPending). One op is one
// restart.
func BenchmarkRestart_PendingWrites(b *testing.B) {
	const pending = 100_000
	tmpl := b.TempDir()
	clock := newClock(wallStart)
	r := openRun(b, tmpl, clock, nil, nil)
	rpc := 0
	tick := func(pod1 bool) {
		now := clock.Now()
		for _, src := range []string{"pod-0", "pod-1"} {
			if src == "pod-1" && !pod1 {
				continue
			}
			rpc++
			if _, err := r.ingest(batch(b, src, callLine("thegram", "s-"+src, rpc, now.Add(-time.Second)))); err != nil {
				b.Fatal(err)
			}
		}
		clock.Add(time.Second)
	}
	for range 20 {
		tick(true)
	}
	tw := clock.Now().Add(-time.Second)
	if _, err := r.ingest(batch(b, "pod-1", pendingPatchLine("s9", 900, tw, "team/x.gram"))); err != nil {
		b.Fatal(err)
	}
	tick(true)
	read := readSyncedLine("s9", 901, clock.Now().Add(-time.Second), "team/x.gram")
	for range 150 {
		tick(false)
	}
	if _, err := r.ingest(batch(b, "pod-1", read)); err != nil {
		b.Fatal(err)
	}
	for range 20 {
		tick(true)
	}
	r.stop()
	// The mark is about tw + 190 s; the range read is [mark - 2m1s - 5m,
	// mark - 2m1s).
	st, err := sqlite.Open(filepath.Join(tmpl, "mcpaudit.db"), sqlite.Options{Synchronous: "normal"})
	if err != nil {
		b.Fatal(err)
	}
	ws := make([]audit.Write, 0, 1000)
	for i := range pending {
		ws = append(ws, audit.Write{CallID: fmt.Sprintf("c_%020x", i), Seq: 0, State: audit.StatePending,
			Time: tw.Add(-200*time.Second + time.Duration(i)*(260*time.Second/pending)), Server: "thegram",
			Tool: "gram_patch", Session: "bench", Document: fmt.Sprint("doc-", i%1000)})
		if len(ws) == cap(ws) {
			if err := st.Commit(context.Background(), audit.Results{Writes: ws}); err != nil {
				b.Fatal(err)
			}
			ws = ws[:0]
		}
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
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
		// What the read of the writes stored pending took, as logged (none
		// on a build that does not read them).
		if m := pendingRead.FindStringSubmatch(r.logs.String()); m != nil {
			n, _ := strconv.Atoi(m[1])
			took, err := time.ParseDuration(m[2])
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(n), "pending-read")
			b.ReportMetric(float64(took.Milliseconds()), "read-ms")
		}
		r.stop()
		b.StartTimer()
	}
}
