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

func TestCacheWithin(t *testing.T) {
	// The id index's buffers outside the Go heap come out of the eighth:
	// 8 MiB in a cgo build, none without cgo.
	const idx = sqlite.IDIndexOffHeapMiB
	for _, c := range []struct {
		cache int
		limit int64
		want  int
	}{
		{0, 0, 0},                       // no limit: the store's default
		{128, 0, 128},                   // no limit: as configured
		{0, 256 << 20, 32 - idx},        // the default 64 held to 256 MiB / 8
		{16, 256 << 20, 16},             // already within
		{64, 1 << 30, 64},               // within 128 - 8
		{64, 4 << 20, 1},                // never below 1 MiB
		{100, (800 + 8*idx) << 20, 100}, // exactly an eighth less the index
		{200, (800+8*idx)<<20 + 1, 100}, // rounded down
		{64, (64 + 8*idx) << 20, 8},     // the index's share first
		{64, (8*idx + 4) << 20, 1},      // nothing left for the cache: 1 MiB
	} {
		if got := cacheWithin(c.cache, c.limit); got != c.want {
			t.Errorf("cacheWithin(%d, %d) = %d, want %d", c.cache, c.limit, got, c.want)
		}
	}
}

// TestOpenStore_CacheHeldToMemoryLimit: serve opens the embedded store with
// its page cache within the eighth of serve.memory_limit left outside the Go
// heap, and says so.
func TestOpenStore_CacheHeldToMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		limit int64
		want  string
	}{
		{256 << 20, fmt.Sprintf(`"cache_mib":%d`, 32-sqlite.IDIndexOffHeapMiB)},
		{0, ""},
	} {
		cfg := NewDefaultConfig()
		cfg.Serve.DataDir = t.TempDir()
		cfg.Serve.MemoryLimit = conf.Size(c.limit)
		var buf bytes.Buffer
		st, err := openStore(context.Background(), cfg, slog.New(slog.NewJSONHandler(&buf, nil)))
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
