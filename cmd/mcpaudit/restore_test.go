package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestRestore_OlderThanRetention: restore says how far back the restored
// calls go, and warns when that is past the default serve.retention: serve
// deletes them at its next start (its first retention sweep), so restoring
// an old backup to look into it loses it again unless retention is raised.
func TestRestore_OlderThanRetention(t *testing.T) {
	ctx := context.Background()
	backup := func(at time.Time) string {
		t.Helper()
		src := t.TempDir()
		st, err := sqlite.Open(filepath.Join(src, storeFile), sqlite.NewDefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		c := &audit.Call{ID: "c_1", Time: at, Server: "thegram", Session: "s", Method: "tools/call", Tool: "gram_read", Responded: true}
		if _, err := st.AppendCalls(ctx, []audit.Record{{Call: c}}); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "backup.db")
		if code, _, errs := cliRun("backup", "--data-dir", src, "--out", out); code != 0 {
			t.Fatalf("backup: exit %d: %s", code, errs)
		}
		return out
	}
	restore := func(from string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, []string{"restore", "--data-dir", t.TempDir(), "--from", from}, nil, &out, &errb); code != 0 {
			t.Fatalf("restore: exit %d: %s%s", code, out.String(), errb.String())
		}
		return out.String()
	}
	old := time.Now().UTC().Add(-45 * 24 * time.Hour).Truncate(time.Second)
	msg := restore(backup(old))
	if !strings.Contains(msg, old.Format(time.RFC3339)) || !strings.Contains(msg, "serve.retention") {
		t.Errorf("restore of calls from %s says:\n%s\nwant their time and a warning naming serve.retention", old.Format(time.RFC3339), msg)
	}
	recent := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	if msg := restore(backup(recent)); strings.Contains(msg, "serve.retention") {
		t.Errorf("restore of calls from an hour ago warns about retention:\n%s", msg)
	}
}
