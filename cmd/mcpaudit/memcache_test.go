package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/conf"
)

func TestCachesWithin(t *testing.T) {
	// The id index's buffers outside the Go heap come out of the eighth:
	// 8 MiB in a cgo build, none without cgo. limit(b) leaves b MiB for
	// the caches.
	const idx = sqlite.IDIndexOffHeapMiB
	limit := func(b int64) int64 { return (b + idx) * 8 << 20 }
	for _, c := range []struct {
		cache, readCache, conns int
		limit                   int64
		writer, reader          int
	}{
		{64, 16, 4, 0, 64, 16},           // no limit: as configured
		{128, 32, 8, 0, 128, 32},         // no limit: as configured
		{64, 16, 4, limit(1000), 64, 16}, // already within
		{64, 16, 4, limit(200), 64, 12},  // the readers held to a quarter
		{64, 16, 4, limit(40), 32, 2},    // both held: the writer takes what the readers leave
		{64, 16, 1, limit(100), 64, 16},  // one reader within its quarter
		{64, 16, 4, limit(100), 64, 6},   // 100 / 4 / 4, rounded down
		{64, 16, 4, limit(10), 6, 1},     // never below 1 MiB a reader
		{64, 16, 4, limit(3), 1, 1},      // nor the writer
		{64, 16, 4, 4 << 20, 1, 1},       // nothing left beside the index
	} {
		w, r := cachesWithin(c.cache, c.readCache, c.conns, c.limit)
		if w != c.writer || r != c.reader {
			t.Errorf("cachesWithin(%d, %d, %d, %d MiB) = %d, %d; want %d, %d", c.cache, c.readCache, c.conns, c.limit>>20, w, r, c.writer, c.reader)
		}
		if budget := int(c.limit/8>>20) - idx; c.limit > 0 && budget >= 1+c.conns && w+c.conns*r > budget {
			t.Errorf("cachesWithin(%d, %d, %d, %d MiB): %d + %d × %d MiB outgrow the %d MiB left", c.cache, c.readCache, c.conns, c.limit>>20, w, c.conns, r, budget)
		}
	}
}

func TestDrainWithin(t *testing.T) {
	f := func(drainBytes, limit, want int64) {
		t.Helper()
		if got := drainWithin(drainBytes, limit); got != want {
			t.Errorf("drainWithin(%d, %d) = %d, want %d", drainBytes, limit, got, want)
		}
	}
	const mib = 1 << 20
	f(0, 0, 0)                 // no limit: rows only, as configured
	f(64*mib, 0, 64*mib)       // no limit: as configured
	f(0, 256*mib, 16*mib)      // a sixteenth of the limit
	f(64*mib, 256*mib, 16*mib) // held to it
	f(4*mib, 256*mib, 4*mib)   // already within
}

// TestOpenStore_CacheHeldToMemoryLimit: serve opens the embedded store with
// its page caches within the eighth of serve.memory_limit left outside the
// Go heap, and says so.
func TestOpenStore_CacheHeldToMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		limit int64
		want  string
	}{
		// 32 MiB less the index: 24 (cgo) or 32; the 4 readers take a
		// quarter, rounded down to whole MiB each.
		{256 << 20, fmt.Sprintf(`"cache_mib":%d,"read_cache_mib":%d`, 32-sqlite.IDIndexOffHeapMiB-4*((32-sqlite.IDIndexOffHeapMiB)/16), (32-sqlite.IDIndexOffHeapMiB)/16)},
		{0, ""},
	} {
		cfg := NewDefaultConfig()
		cfg.Serve.DataDir = t.TempDir()
		cfg.Serve.MemoryLimit = conf.Size(c.limit)
		var buf bytes.Buffer
		st, err := openStore(context.Background(), cfg, slog.New(slog.NewJSONHandler(&buf, nil)), nil)
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
		got := buf.String()
		if c.want == "" && strings.Contains(got, "page cache") || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("memory_limit %d: log %q, want %q", c.limit, got, c.want)
		}
	}
}
