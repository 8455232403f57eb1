package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

// TestFilesPrivate opens a store under umask 022 and checks that the
// database, its log and its shared-memory file are readable by their
// owner only.
func TestFilesPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, datadir.DirMode); err != nil {
		t.Fatal(err)
	}
	s, err := Open(filepath.Join(dir, "mcpaudit.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := storetest.NewGenerator(1, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCalls(context.Background(), g.Records(100)); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(context.Background(), audit.Results{Watermark: storetest.T0}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) < 3 {
		t.Fatalf("want the database, its log and shm while open; have %d files", len(entries))
	}
	if err := datadir.Check(dir); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := datadir.Check(dir); err != nil {
		t.Error(err)
	}
}
