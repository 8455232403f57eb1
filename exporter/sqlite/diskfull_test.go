package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"
)

// TestReady_DiskFull: a write that fails for want of space makes the
// store not ready, saying so (syscall.ENOSPC, the file's base name only);
// a smaller write that succeeds meanwhile does not make it ready again (a
// few calls can fit a disk that refused many), one as large does. Other
// errors leave readiness alone. The free space is unknown here (the
// directory does not exist), so only writes clear it; serve's
// TestServe_DiskFullNotReady frees a real disk.
func TestReady_DiskFull(t *testing.T) {
	full := fmt.Errorf("cannot append calls: %w", &fs.PathError{Op: "write", Path: "/gone/mcpaudit.db", Err: syscall.ENOSPC})
	type write struct {
		err   error
		bytes int64
	}
	f := func(writes []write, wantFull bool) {
		t.Helper()
		s := &Store{path: "/gone/dir/mcpaudit.db"}
		for _, w := range writes {
			s.noteWrite(w.err, w.bytes)
		}
		err := s.Ready()
		if got := err != nil; got != wantFull {
			t.Fatalf("%v: Ready() = %v, want full %v", writes, err, wantFull)
		}
		if err != nil && (!errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "writing mcpaudit.db") || strings.Contains(err.Error(), "/gone")) {
			t.Errorf("Ready() = %v: want ENOSPC, the file's base name and no path", err)
		}
	}
	f(nil, false)
	f([]write{{nil, 100}}, false)
	f([]write{{errors.New("database is locked"), 100}}, false)
	f([]write{{full, 1000}}, true)
	f([]write{{full, 1000}, {nil, 999}}, true)
	f([]write{{full, 1000}, {nil, 1000}}, false)
	// The largest write refused since the disk was found full is the one
	// to fit again.
	f([]write{{full, 1000}, {full, 10}, {nil, 500}}, true)
	f([]write{{full, 1000}, {full, 10}, {nil, 1000}}, false)
	// A write that is no calls (results, retention) refused: any append
	// that succeeds after it clears it.
	f([]write{{full, 0}, {nil, 1}}, false)
	f([]write{{full, 1000}, {nil, 1000}, {full, 5}}, true)
}
