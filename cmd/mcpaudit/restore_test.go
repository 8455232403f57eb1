package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
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

// TestRestore_DamagedBackupRefused: a backup whose call logs' copy lost
// blocks its store records as synced (the segment cut to half, adv52) is
// refused before restore moves anything: exit 1, naming the segment file,
// the blocks and the calls, and the data dir byte for byte as it was. A
// good backup of the same data dir is restored, and restore's line gives
// one total of its calls, those of the call logs. A backup without its
// FILE.calls/, and one with a byte flipped in a segment, are refused the
// same way. Before rst52 the
// damaged backup was restored (exit 0, the data dir's files moved aside)
// and serve's next start refused it; the line said "0 calls" first.
func TestRestore_DamagedBackupRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.Serve.SQLite.Calls = sqlite.CallsAuto
	postAndStop(t, cfg, 2)
	if !calllogs.InUse(dir) {
		t.Fatal("serve with calls: auto on a new data dir kept no call log")
	}
	code, out, errs := cliRun("export", "--data-dir", dir)
	calls := strings.Count(out, "\n")
	if code != 0 || calls == 0 {
		t.Fatalf("export --data-dir: exit %d, %d calls: %s", code, calls, errs)
	}
	bk := t.TempDir()
	good, bad, flipped := filepath.Join(bk, "good.db"), filepath.Join(bk, "bad.db"), filepath.Join(bk, "flipped.db")
	for _, f := range []string{good, bad, flipped} {
		if code, out, errs := cliRun("backup", "--data-dir", dir, "--out", f); code != 0 {
			t.Fatalf("backup: exit %d: %s%s", code, out, errs)
		}
	}
	segs, _ := filepath.Glob(filepath.Join(callsCopy(bad), "*", "*.seg"))
	if len(segs) == 0 {
		t.Fatalf("no segment in %s", callsCopy(bad))
	}
	seg := segs[len(segs)-1]
	st, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(seg, st.Size()/2); err != nil {
		t.Fatal(err)
	}

	before := treeSums(t, dir)
	code, out, errs = cliRun("restore", "--data-dir", dir, "--from", bad)
	if code != 1 {
		t.Errorf("restore of a backup whose segment was cut to half: exit %d, want 1: %s%s", code, out, errs)
	}
	for _, want := range []string{seg, "blocks ", " calls in all", dir + " is left as it was"} {
		if !strings.Contains(errs, want) {
			t.Errorf("restore's refusal does not say %q: %s", want, errs)
		}
	}
	leftAlone := func(who string) {
		t.Helper()
		after := treeSums(t, dir)
		if len(after) != len(before) {
			t.Errorf("%s left %d files in the data dir, were %d", who, len(after), len(before))
		}
		for p, sum := range before {
			if after[p] != sum {
				t.Errorf("%s changed %s", who, p)
			}
		}
		if aside, _ := filepath.Glob(filepath.Join(dir, "before-restore-*")); len(aside) > 0 {
			t.Errorf("%s moved files aside into %v", who, aside)
		}
	}
	leftAlone("the refused restore")

	// The call logs' copy gone whole: the store's records of blocks say
	// there were calls in it.
	if err := os.RemoveAll(callsCopy(bad)); err != nil {
		t.Fatal(err)
	}
	code, out, errs = cliRun("restore", "--data-dir", dir, "--from", bad)
	if code != 1 || !strings.Contains(errs, callsCopy(bad)+" is missing") || !strings.Contains(errs, "left as it was") {
		t.Errorf("restore of a backup without its call logs' copy: exit %d, want 1 naming it: %s%s", code, out, errs)
	}
	leftAlone("the restore refused for want of FILE.calls")

	// A byte flipped in the first block, a whole block after it: the
	// read-only open of the copy refuses it; before rst52 it did so after
	// the data dir's files were moved aside.
	segs = flipFirstBlock(t, callsCopy(flipped))
	code, out, errs = cliRun("restore", "--data-dir", dir, "--from", flipped)
	if code != 1 || !strings.Contains(errs, segs[0]) || !strings.Contains(errs, "left as it was") {
		t.Errorf("restore of a backup with a byte flipped in a segment: exit %d, want 1 naming it: %s%s", code, out, errs)
	}
	leftAlone("the restore refused for a flipped byte")

	code, out, errs = cliRun("restore", "--data-dir", dir, "--from", good)
	if code != 0 {
		t.Fatalf("restore of the good backup: exit %d: %s%s", code, out, errs)
	}
	if want := fmt.Sprintf("restored %s into %s: %d calls (%d calls of the call logs", good, dir, calls, calls); !strings.Contains(out, want) {
		t.Errorf("restore says:\n%s\nwant %q", out, want)
	}
	if strings.Contains(out, ": 0 calls") {
		t.Errorf("restore of a backup of %d calls says 0 calls:\n%s", calls, out)
	}
	if code, out, errs := cliRun("verify", "--data-dir", dir); code != 0 {
		t.Errorf("verify after the restore: exit %d: %s%s", code, out, errs)
	}
	if code, out, errs := cliRun("export", "--data-dir", dir); code != 0 || strings.Count(out, "\n") != calls {
		t.Errorf("export after the restore: exit %d, %d calls of %d: %s", code, strings.Count(out, "\n"), calls, errs)
	}
}
