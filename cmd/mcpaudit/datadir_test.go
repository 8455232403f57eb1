package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

// TestServe_DataDirLocked: a second serve on the data dir of a running one
// refuses to start and names the holder's pid; once the first stops, the
// directory can be served again.
func TestServe_DataDirLocked(t *testing.T) {
	dir := t.TempDir()
	first := startTest(t, testConfig(t, dir))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err := startServer(context.Background(), testConfig(t, dir), log)
	if !errors.Is(err, datadir.ErrLocked) || !strings.Contains(err.Error(), "in use by pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second serve on %s: %v; want it refused naming pid %d", dir, err, os.Getpid())
	}
	// The first still serves.
	resp := postCalls(t, first, ndjson(mergedCapture(t)[:10]), false)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("first server after the refused second: status %d", resp.StatusCode)
	}
	if err := first.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	startTest(t, testConfig(t, dir))
}

// TestServe_FilesPrivate: under umask 022, everything serve writes in its
// data dir is readable by its owner only, with the calls in the table and
// in call logs (whose directories and segments were group-readable,
// 0750 and 0640, until dflt51).
func TestServe_FilesPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for _, calls := range []string{sqlite.CallsSQLite, sqlite.CallsLog} {
		t.Run(calls, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			cfg := testConfig(t, dir)
			cfg.Serve.SQLite.Calls = calls
			s := startTest(t, cfg)
			resp := postCalls(t, s, ndjson(mergedCapture(t)), false)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if err := s.shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			entries, err := os.ReadDir(dir)
			if err != nil || len(entries) < 3 {
				t.Fatalf("data dir holds %d entries (%v); want the store, the lock and the partitions file", len(entries), err)
			}
			if err := datadir.Check(dir); err != nil {
				t.Fatal(err)
			}
		})
	}
}
