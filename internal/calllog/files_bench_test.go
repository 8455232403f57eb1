package calllog

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
)

// benchSegments is a log of 720 sealed segments of 20 calls (30 days of
// hourly seals), made once per process under MCPAUDIT_BENCH_DIR (default
// the temporary directory), and its calls.
var benchSegments struct {
	once sync.Once
	dir  string
	recs []audit.Record
}

func manySegments(b *testing.B) (string, []audit.Record) {
	b.Helper()
	benchSegments.once.Do(func() {
		root := os.Getenv("MCPAUDIT_BENCH_DIR")
		if root == "" {
			root = os.TempDir()
		}
		dir, err := os.MkdirTemp(root, "fd52-segments-")
		if err != nil {
			b.Fatal(err)
		}
		l, err := Open(dir, Options{SegmentBytes: 1})
		if err != nil {
			b.Fatal(err)
		}
		recs := gen(b, 52, 720*20)
		for i := 0; i < len(recs); i += 20 {
			if _, err := l.Append(context.Background(), recs[i:i+20]); err != nil {
				b.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
		benchSegments.dir, benchSegments.recs = dir, recs
	})
	if benchSegments.dir == "" {
		b.Fatal("no segments")
	}
	return benchSegments.dir, benchSegments.recs
}

func openFDs(b *testing.B) int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		b.Skip("no /proc/self/fd")
	}
	return len(fds)
}

// BenchmarkOpenSegments: Open of a log of 720 sealed segments (their
// indexes' time index read and checked), and the files it holds open
// after (fds/open).
func BenchmarkOpenSegments(b *testing.B) {
	dir, _ := manySegments(b)
	base := openFDs(b)
	b.ResetTimer()
	fds := 0
	for i := 0; i < b.N; i++ {
		l, err := Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		fds += openFDs(b) - base
		l.Close()
	}
	b.ReportMetric(float64(fds)/float64(b.N), "fds/open")
}

// BenchmarkGetAtSegments: GetAt of calls spread over the 720 segments,
// each block read from its file (a block cache of one block), with the
// segments' files in the cache (warm: a bound of 1024) or not (cold: a
// bound of one, every lookup opens its segment's file).
func BenchmarkGetAtSegments(b *testing.B) {
	dir, recs := manySegments(b)
	for _, c := range []struct {
		name  string
		files int
	}{{"warm", 1024}, {"cold", 1}} {
		b.Run(c.name, func(b *testing.B) {
			files := NewFiles(c.files)
			l, err := Open(dir, Options{Files: files, BlockCacheBytes: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			ctx := context.Background()
			// Warm the cache (and the tables) with a pass over every segment.
			for i := 0; i < len(recs); i += 20 {
				l.GetAt(ctx, recs[i].Call.ID, recs[i].Call.Time)
			}
			opens := files.Stats().Opens
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := &recs[(i*20*7+i%20)%len(recs)] // another segment each time
				if _, ok, err := l.GetAt(ctx, r.Call.ID, r.Call.Time); err != nil || !ok {
					b.Fatalf("GetAt %s: %v, %v", r.Call.ID, ok, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(files.Stats().Opens-opens)/float64(b.N), "opens/op")
			b.ReportMetric(float64(files.Stats().Open), "files-open")
		})
	}
}
