package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
)

// TestVerifyCommand_CallLogsRemoved: with every call log deleted (calls/
// gone) verify is TAMPERED, naming the tenant and the segment file of the
// blocks the chain records. Fails before verify opened the logs whether
// or not calls/ held one: it ran without them and was green.
func TestVerifyCommand_CallLogsRemoved(t *testing.T) {
	dir, pub := signedCallsLog(t)
	if err := os.RemoveAll(calllogs.Dir(dir)); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"verify", "--data-dir", dir, "--public-key", pub}, nil, &out, &errb)
	seg := filepath.Join(calllogs.Dir(dir), calllogs.DirName(""), calllog.SegmentName(1))
	if code != 1 || !strings.Contains(out.String(), `TAMPERED: tenant "": call log `+seg+`: the segment file is gone`) {
		t.Errorf("verify with every call log deleted: want exit 1, TAMPERED naming %s; exit %d\n%s%s", seg, code, out.String(), errb.String())
	}
}
