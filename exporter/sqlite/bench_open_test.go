package sqlite

import (
	"bufio"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkOpenSchema3 measures the two long opens of a large store on a
// copy of the schema-3 file MCPAUDIT_BENCH_SCHEMA3 (how to write one with
// the code of schema 3: docs/benchmarks.md, "Opening a large store"):
//
//   - migrate: the first Open of the file, which migrates it to schema 4
//     (one transaction copying every call) and builds the id index;
//   - rebuild: an Open of the migrated file whose id index was removed.
//
// Each reports its seconds (open-s, and the migration's and the index's own
// from the store's log lines), seconds per million calls, the peak resident
// memory of the process during the open (VmHWM, reset before it), and the
// disk it took beyond the file it started from: the data files (the file,
// its WAL and the id index) and SQLite's deleted temporary files (sorts),
// sampled every 50 ms. The file is in the page cache (it was just copied).
//
//	MCPAUDIT_BENCH_SCHEMA3=/tmp/s3-1000000.db go test -run '^$' -bench OpenSchema3 -benchtime 1x ./exporter/sqlite/
func BenchmarkOpenSchema3(b *testing.B) {
	src := os.Getenv("MCPAUDIT_BENCH_SCHEMA3")
	if src == "" {
		b.Skip("MCPAUDIT_BENCH_SCHEMA3 is not set: no schema-3 file to open")
	}
	b.Run("migrate", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			path := copyStore(b, src)
			m := startSampling(b, path)
			b.StartTimer()
			lines, d := timedOpen(b, path)
			m.stop(d)
			got := expectLines(b, lines, "migrating the store:", "migrated the store", "building the call id index:", "built the call id index")
			calls := float64(*got[0].Calls)
			b.ReportMetric(*got[1].Elapsed/1e9, "migrate-s")
			b.ReportMetric(*got[3].Elapsed/1e9, "index-s")
			m.report(b, calls)
			os.RemoveAll(filepath.Dir(path))
		}
	})
	b.Run("rebuild", func(b *testing.B) {
		b.StopTimer()
		path := copyStore(b, src)
		timedOpen(b, path)
		for range b.N {
			if err := os.RemoveAll(IDIndexDir(path)); err != nil {
				b.Fatal(err)
			}
			m := startSampling(b, path)
			b.StartTimer()
			lines, d := timedOpen(b, path)
			m.stop(d)
			got := expectLines(b, lines, "building the call id index:", "built the call id index")
			b.ReportMetric(*got[1].Elapsed/1e9, "index-s")
			m.report(b, float64(*got[1].Calls))
		}
		os.RemoveAll(filepath.Dir(path))
	})
}

// copyStore copies the file at src into a new directory and returns the
// copy's path.
func copyStore(b *testing.B, src string) string {
	b.Helper()
	dir, err := os.MkdirTemp("", "openschema3")
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "mcpaudit.db")
	in, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
	return path
}

// timedOpen opens and closes the store at path, and returns its log lines
// and how long Open took. It stops the benchmark's timer after Open.
func timedOpen(b *testing.B, path string) ([]logLine, time.Duration) {
	b.Helper()
	log, lines := captured(b)
	start := time.Now()
	s, err := Open(path, Options{Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	b.StopTimer()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	return lines(), d
}

// sampling follows an open's disk use and the process's peak memory.
type sampling struct {
	path      string
	elapsed   time.Duration
	base      int64 // the data files' bytes before
	peak, wal int64 // the data files' and the WAL's peaks
	temp      int64 // the deleted temporary files' peak
	after     int64
	done      chan struct{}
	wg        sync.WaitGroup
	hwmReset  bool
	hwm       int64
}

func startSampling(b *testing.B, path string) *sampling {
	b.Helper()
	m := &sampling{path: path, done: make(chan struct{})}
	m.base = dataBytes(path)
	m.peak = m.base
	// What an earlier open left in the heap goes back to the system
	// first; then writing 5 to clear_refs resets the peak resident set
	// (VmHWM) to the current one.
	debug.FreeOSMemory()
	m.hwmReset = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			m.sample()
			select {
			case <-m.done:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *sampling) sample() {
	m.peak = max(m.peak, dataBytes(m.path))
	if fi, err := os.Stat(m.path + "-wal"); err == nil {
		m.wal = max(m.wal, fi.Size())
	}
	m.temp = max(m.temp, deletedOpenBytes())
}

// stop ends the sampling of an Open that took d (and the Close after it).
func (m *sampling) stop(d time.Duration) {
	m.elapsed = d
	close(m.done)
	m.wg.Wait()
	m.after = dataBytes(m.path)
	m.hwm = statusKiB("VmHWM") << 10
}

func (m *sampling) report(b *testing.B, calls float64) {
	const mib = 1 << 20
	b.ReportMetric(m.elapsed.Seconds(), "open-s")
	b.ReportMetric(m.elapsed.Seconds()/calls*1e6, "s/Mcalls")
	b.ReportMetric(calls, "calls")
	b.ReportMetric(float64(m.base)/mib, "before-MiB")
	b.ReportMetric(float64(m.peak-m.base)/mib, "extra-peak-MiB")
	b.ReportMetric(float64(m.wal)/mib, "wal-peak-MiB")
	b.ReportMetric(float64(m.temp)/mib, "tmp-peak-MiB")
	b.ReportMetric(float64(m.after)/mib, "after-MiB")
	if m.hwmReset {
		b.ReportMetric(float64(m.hwm)/mib, "rss-peak-MiB")
	}
}

// dataBytes is the size of a store's files: the database, its WAL and
// shared memory, and the id index.
func dataBytes(path string) int64 {
	var n int64
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	filepath.WalkDir(IDIndexDir(path), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// deletedOpenBytes is the size of the files this process holds open but
// has deleted: SQLite's temporary files.
func deletedOpenBytes() int64 {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		fd := filepath.Join("/proc/self/fd", e.Name())
		target, err := os.Readlink(fd)
		if err != nil || !strings.HasSuffix(target, " (deleted)") {
			continue
		}
		if fi, err := os.Stat(fd); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

// statusKiB reads a "kB" field of /proc/self/status.
func statusKiB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}
