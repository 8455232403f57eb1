package clickhouse

import (
	"os"
	"testing"

	spoollog "github.com/mcpaudit/mcpaudit/internal/spool"
)

// What the spool's tests here use of package internal/spool's insides.
const (
	frameHeaderLen = spoollog.FrameHeaderLen
	frameLenAt     = spoollog.FrameLenAt
	frameSumAt     = spoollog.FrameSumAt
)

var (
	castagnoli = spoollog.Castagnoli
	fdatasync  = spoollog.Fdatasync
	keepTail   = spoollog.KeepTail
)

// spoolPath returns the file of seq with the extension ext in dir.
func spoolPath(dir string, seq uint64, ext string) string { return spoollog.FilePath(dir, seq, ext) }

// hookKeepTorn replaces how recovery keeps a torn tail for the test.
func hookKeepTorn(t *testing.T, f func(string, string, *os.File, int64, int64) (string, error)) {
	t.Helper()
	t.Cleanup(spoollog.SetKeepTorn(f))
}
