package calllog

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// appendUntilKilled is the child of a test that kills it: it appends recs
// to the log in dir in batches, saying on stdout which batch was
// acknowledged ("acked N"), and waits to be killed.
func appendUntilKilled(t *testing.T, dir string, opts Options, recs []audit.Record, batch int) {
	l := open(t, dir, opts)
	for i := 0; i*batch < len(recs); i++ {
		appendAll(t, l, recs[i*batch:(i+1)*batch])
		fmt.Fprintf(os.Stdout, "acked %d\n", i)
	}
	select {} // until killed
}

// startAppender starts this test binary running test alone with env set
// (its child, appendUntilKilled) and returns it with a scanner of its
// stdout.
func startAppender(t *testing.T, test, env string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewScanner(out)
}

// dirSums returns the SHA-256 of every file of dir by name.
func dirSums(t *testing.T, dir string) map[string][sha256.Size]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][sha256.Size]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = sha256.Sum256(b)
	}
	return out
}

// readPrefix opens dir read-only, reads every call and checks that they
// are recs[:n] for some n of at least acked (a prefix of the appends, each
// call once), and returns n.
func readPrefix(t *testing.T, dir string, recs []audit.Record, acked int) int {
	t.Helper()
	l, err := Open(dir, Options{ReadOnly: true, SegmentBytes: 64 << 10})
	if err != nil {
		t.Fatalf("read-only open beside the writer: %v", err)
	}
	defer l.Close()
	seen := map[string]int{}
	for _, id := range scanAll(t, l, time.Time{}, time.Time{}) {
		seen[id]++
	}
	n := len(seen)
	for i, r := range recs[:max(n, acked)] {
		if seen[r.Call.ID] != 1 {
			t.Fatalf("read-only: %d calls read, %d acknowledged; call %d read %d times, want once (a prefix of the appends)", n, acked, i, seen[r.Call.ID])
		}
	}
	if _, ok, err := l.Get(context.Background(), recs[0].Call.ID); !ok || err != nil {
		t.Fatalf("read-only Get of the first call: %v, %v", ok, err)
	}
	return n
}

// TestReadOnly_BesideWriter opens a log read-only, again and again, while
// another process appends to it (sealing segments of 64 KiB): each open
// reads a prefix of the appends holding every call acknowledged before
// it. Then, the writer killed and a torn block left at the live segment's
// end (as a write in flight leaves it) with an index being written beside
// it, a read-only open changes no byte of any file (an open to write cuts
// the tail and removes the temporary index: checked below).
func TestReadOnly_BesideWriter(t *testing.T) {
	const batch, batches = 20, 1000
	opts := Options{SegmentBytes: 64 << 10}
	if dir := os.Getenv("CALLLOG_RO_CHILD_DIR"); dir != "" {
		appendUntilKilled(t, dir, opts, gen(t, 21, batch*batches), batch)
	}
	if testing.Short() {
		t.Skip("starts a process")
	}
	recs := gen(t, 21, batch*batches)
	dir := t.TempDir()
	cmd, sc := startAppender(t, "TestReadOnly_BesideWriter", "CALLLOG_RO_CHILD_DIR="+dir)
	defer cmd.Process.Kill()
	acked, reads, last := -1, 0, 0
	for sc.Scan() {
		var i int
		if _, err := fmt.Sscanf(sc.Text(), "acked %d", &i); err != nil {
			continue
		}
		acked = i
		if i%40 == 5 {
			// Read while the writer goes on (its pipe fills meanwhile
			// at worst, which only slows it).
			n := readPrefix(t, dir, recs, (acked+1)*batch)
			if n < last {
				t.Fatalf("read %d calls after reading %d", n, last)
			}
			last = n
			reads++
		}
		if i >= 300 {
			break
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if reads < 5 {
		t.Fatalf("%d reads beside the writer, want 5 or more", reads)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var live string
	segs := 0
	for _, e := range ents {
		if filepath.Ext(e.Name()) == segExt {
			live = filepath.Join(dir, e.Name())
			segs++
		}
	}
	if segs < 3 {
		t.Fatalf("%d segments, want sealed ones beside the live one", segs)
	}
	f, err := os.OpenFile(live, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A block's magic and half a header: a write in flight.
	if _, err := f.WriteString(blockMagic + "\x01\x02\x03"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(dir, "99999"+tmpExt), []byte("partial index"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := dirSums(t, dir)
	readPrefix(t, dir, recs, (acked+1)*batch)
	after := dirSums(t, dir)
	if len(after) != len(before) {
		t.Fatalf("a read-only open left %d files of %d", len(after), len(before))
	}
	for name, sum := range before {
		if after[name] != sum {
			t.Errorf("a read-only open changed %s", name)
		}
	}
	l, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), recs[:1]); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only Append: %v, want ErrReadOnly", err)
	}
	if _, err := l.DeleteBefore(time.Now()); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only DeleteBefore: %v, want ErrReadOnly", err)
	}
	l.Close()
	// The same open to write cuts the tail: the check above can fail.
	l = open(t, dir, Options{SegmentBytes: 64 << 10})
	l.Close()
	if changed := dirSums(t, dir); changed[filepath.Base(live)] == before[filepath.Base(live)] {
		t.Errorf("an open to write left the torn tail of %s: the test shows nothing", live)
	}
}
