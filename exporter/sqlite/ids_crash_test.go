package sqlite

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// crashCalls is how many calls the crashing child appends: some 20,000
// fill the index's 4 MiB memtable, so some are flushed and the last are
// not when it is killed.
const crashCalls = 30000

// crashEnv names the data file a child of TestIDIndex_CrashWithoutLog
// appends to until it is killed.
const crashEnv = "MCPAUDIT_TEST_IDS_CRASH_FILE"

// TestIDIndex_CrashWithoutLog: serve is killed (SIGKILL) while it appends,
// its index written without pebble's log (op19b). The index then holds
// what pebble flushed: whole memtables in order, each batch with its mark,
// so the mark it kept never covers a lost entry. The next open catches it
// up from the file: every call stored is found by id, the index holds one
// entry per call, and the calls sent again are stored once (their unique
// key, not the index, dedupes them). Added by rev19b, reviewing op19b.
//
// The crash is real: a child process (this test binary) appends to a
// real SQLite file and its pebble index and is killed with SIGKILL.
func TestIDIndex_CrashWithoutLog(t *testing.T) {
	if path := os.Getenv(crashEnv); path != "" {
		crashChild(t, path)
		return
	}
	path := filepath.Join(t.TempDir(), "audit.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestIDIndex_CrashWithoutLog$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	// Killed in the middle of its appends, once 20,000 calls are acked.
	acked := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			acked, _ = strconv.Atoi(n)
			if acked >= 20000 {
				break
			}
		}
	}
	if acked < 20000 {
		t.Fatalf("the child stopped after %d calls acked", acked)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true

	// What the crash left of the index: its mark as flushed.
	persisted := persistedMark(t, IDIndexDir(path))
	t.Logf("killed after %d calls acked; the index kept its mark at call %d", acked, persisted)

	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	stored := count(t, s)
	if stored < acked {
		t.Fatalf("%d calls stored after the crash, %d were acked", stored, acked)
	}
	if got := s.ids.mark.Load(); got != int64(stored) {
		t.Errorf("index open through call %d, want %d (caught up from the file)", got, stored)
	}
	recs := records(t, crashCalls)
	if got, want := lookupIDs(t, s, ids(recs[:stored])), keysOf(recs[:stored]); !slices.Equal(got, want) {
		t.Errorf("found %d of the %d calls stored by id after the crash", len(got), len(want))
	}
	if got := indexedKeys(t, s); got != stored {
		t.Errorf("the index holds %d id entries, want %d", got, stored)
	}
	// Every call sent again: those stored before the crash are not new.
	n, err := s.AppendCalls(ctx, recs)
	if err != nil {
		t.Fatal(err)
	}
	if n != crashCalls-stored {
		t.Errorf("sending the %d calls again stored %d, want %d (the %d stored before the crash are not new)", crashCalls, n, crashCalls-stored, stored)
	}
	if got := count(t, s); got != crashCalls {
		t.Errorf("%d calls stored, want %d", got, crashCalls)
	}
	if got, want := lookupIDs(t, s, ids(recs)), keysOf(recs); !slices.Equal(got, want) {
		t.Errorf("found %d of %d calls by id", len(got), len(want))
	}
	if got := indexedKeys(t, s); got != crashCalls {
		t.Errorf("the index holds %d id entries, want %d", got, crashCalls)
	}
	if got := s.IDIndexFailures(); got != 0 {
		t.Errorf("IDIndexFailures = %d, want 0", got)
	}
	checkDocIndex(t, s)
}

// crashChild appends crashCalls calls to the file at path, telling its
// parent each batch acked, then waits to be killed.
func crashChild(t *testing.T, path string) {
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs := records(t, crashCalls)
	for i := 0; i < len(recs); i += 500 {
		if _, err := s.AppendCalls(context.Background(), recs[i:i+500]); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("acked %d\n", i+500)
	}
	time.Sleep(time.Hour) // killed
}

// persistedMark reads the mark of the index in dir as its files hold it,
// from a copy (opening it read-only would replay a log, if any, into
// memory only; the copy keeps the dir as the crash left it).
func persistedMark(t *testing.T, dir string) int64 {
	t.Helper()
	cp := filepath.Join(t.TempDir(), "ids")
	if err := os.CopyFS(cp, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(cp, "LOCK"))
	db, err := pebble.Open(cp, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, closer, err := db.Get(idsMarkKey)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return int64(binary.BigEndian.Uint64(v))
}
