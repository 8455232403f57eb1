package forward

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestJournal_RewriteKeepsOrder (rev17px): a journal rewritten past 1 MiB
// keeps its entries in flight in the order they began, as the recovery
// buffers them: the calls a dead relay had in flight reach the collector
// oldest first, with or without a rewrite.
func TestJournal_RewriteKeepsOrder(t *testing.T) {
	cfg := testConfig(t, "http://127.0.0.1:1")
	f, _ := newForwarder(t, cfg)
	j := f.Journal()
	const held = 40
	for i := 1; i <= held; i++ {
		j.Begin(uint64(i), bytes.TrimSuffix(line(i), []byte("\n")))
	}
	first := j.path
	l := bytes.TrimSuffix(line(99), []byte("\n"))
	for i := uint64(held + 1); j.path == first; i++ {
		j.Begin(i, l)
		j.End(i)
		if i > 4*journalCompactBytes/uint64(len(l)) {
			t.Fatal("the journal was never rewritten")
		}
	}
	fh, err := os.Open(j.path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	left, err := unfinished(fh)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != held {
		t.Fatalf("%d entries in flight after the rewrite, want %d", len(left), held)
	}
	for i, rec := range left {
		if want := bytes.TrimSuffix(line(i+1), []byte("\n")); !bytes.Equal(rec, want) {
			t.Fatalf("entry %d in flight after the rewrite is\n%s\nwant (the order they began)\n%s", i, rec, want)
		}
	}
	crash(f)
}

// TestJournal_IdleTruncate (rev17px): past 1 MiB with nothing in flight the
// journal is emptied in place, stays this process's (locked, same path),
// and keeps taking lines; a crash after it leaves only what began since.
func TestJournal_IdleTruncate(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	cfg := testConfig(t, "http://127.0.0.1:1")
	f, _ := newForwarder(t, cfg)
	j := f.Journal()
	path := j.path
	l := bytes.TrimSuffix(line(1), []byte("\n"))
	n := uint64(journalCompactBytes/len(l) + 2)
	for i := uint64(1); i <= n; i++ {
		j.Begin(i, l)
		j.End(i)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if j.path != path || st.Size() >= journalCompactBytes {
		t.Fatalf("after %d calls, none in flight: journal %s of %d bytes; want %s emptied in place", n, j.path, st.Size(), path)
	}
	j.Begin(n+1, bytes.TrimSuffix(line(2), []byte("\n")))
	crash(f)
	cfg.URL = srv.URL
	f2, _ := newForwarder(t, cfg)
	defer f2.Close(context.Background())
	waitFor(t, "the call in flight", func() bool { return len(c.got()) >= 1 })
	time.Sleep(50 * time.Millisecond)
	if got := c.got(); len(got) != 1 || got[0] != string(bytes.TrimSuffix(line(2), []byte("\n"))) {
		t.Errorf("recovered %q; want only the call begun after the truncation", got)
	}
}

// TestJournal_ReplacedJournalNotTaken (rev17px): a relay that opened a
// live relay's journal just before that relay rewrote (or deleted) it gets
// its lock once the old file is released, and must not record the calls
// in it: they are still in flight, in the new journal. Before the fix the
// second relay sent them as unanswered while the first still had them.
func TestJournal_ReplacedJournalNotTaken(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	cfg := testConfig(t, srv.URL)
	cfg.JournalScan = time.Hour
	a, _ := newForwarder(t, cfg)
	b, _ := newForwarder(t, cfg)
	defer b.Close(context.Background())
	j := a.Journal()
	j.Begin(1, bytes.TrimSuffix(line(1), []byte("\n")))
	old := j.path
	fh, err := os.Open(old) // b's recovery scan, between its Open and its Flock
	if err != nil {
		t.Fatal(err)
	}
	l := bytes.TrimSuffix(line(2), []byte("\n"))
	for i := uint64(2); j.path == old; i++ {
		j.Begin(i, l)
		j.End(i)
	}
	b.recoverJournal(old, fh)
	time.Sleep(100 * time.Millisecond)
	if got := c.got(); len(got) != 0 {
		t.Errorf("b recorded a's calls in flight from the journal a replaced: %q", got)
	}
	j.End(1)
	crash(a)
}

// TestJournal_WriteFailureKeepsLock (rev17px): once a write to the journal
// fails, the journal is off, but the file stays locked while its process
// lives: neither its own sender nor another relay's takes the calls still
// in flight as those of a dead relay. Before the fix the file was closed
// (its lock freed), and the next scan sent them without a response while
// they were in flight (seen with a full tmpfs: "calls in flight when their
// relay died recorded without a response" from the live relay itself, then
// the same call again with its outcome). A crash after the failure leaves
// them for the next relay; a graceful close deletes the file.
func TestJournal_WriteFailureKeepsLock(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	for _, stop := range []string{"close", "crash"} {
		t.Run(stop, func(t *testing.T) {
			cfg := testConfig(t, srv.URL)
			cfg.JournalScan = 10 * time.Millisecond
			f, _ := newForwarder(t, cfg)
			j := f.Journal()
			j.Begin(1, bytes.TrimSuffix(line(1), []byte("\n")))
			// Writes fail from now on (as on a full disk): the file is
			// reopened read-only under the same lock.
			j.mu.Lock()
			ro, err := os.Open(j.path)
			if err != nil {
				t.Fatal(err)
			}
			j.fh.Close()
			if err := syscall.Flock(int(ro.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				t.Fatal(err)
			}
			j.fh = ro
			j.mu.Unlock()
			j.Begin(2, bytes.TrimSuffix(line(2), []byte("\n")))
			path := j.path
			time.Sleep(20 * cfg.JournalScan)
			if got := c.got(); len(got) != 0 {
				t.Fatalf("calls in flight of a live relay whose journal failed were recorded: %q", got)
			}
			if stop == "close" {
				f.Close(context.Background())
				if _, err := os.Stat(path); !os.IsNotExist(err) {
					t.Errorf("a graceful close left the failed journal (%v)", err)
				}
				return
			}
			crash(f)
			f2, _ := newForwarder(t, cfg)
			defer f2.Close(context.Background())
			waitFor(t, "the call in flight at the crash", func() bool { return len(c.got()) == 1 })
			if got := c.got()[0]; got != string(bytes.TrimSuffix(line(1), []byte("\n"))) {
				t.Errorf("recovered %s, want the call in flight before the failure %s", got, line(1))
			}
			c.mu.Lock()
			c.lines = nil
			c.mu.Unlock()
		})
	}
}

// TestJournal_TornLastLine (rev17px): a process killed in the middle of a
// long write (or a write cut short by a full disk) leaves a last line
// without its newline; it is not a whole record even when it happens to end
// with "}", and is skipped.
func TestJournal_TornLastLine(t *testing.T) {
	f := func(content string, want ...string) {
		t.Helper()
		p := filepath.Join(t.TempDir(), "x"+journalExt)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		fh, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		got, err := unfinished(fh)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, g := range got {
			s = append(s, string(g))
		}
		if strings.Join(s, "|") != strings.Join(want, "|") {
			t.Errorf("unfinished(%q) = %q, want %q", content, s, want)
		}
	}
	f("B 1 {\"a\":1}\n", `{"a":1}`)
	f("B 1 {\"a\":1}\nB 2 {\"a\":{\"b\":1}", `{"a":1}`)
	f("B 1 {\"a\":1}\nB 2 {\"a\":{\"b\":1}}", `{"a":1}`)
	f("B 1 {\"a\":1}\nE 1", `{"a":1}`) // a torn E: the entry did not end
	f("B 1 {\"a\":1}\nE 1\n")
	f("B 1 {\"a\":1}\nB 2 {\"a\":2}\nE 1\n", `{"a":2}`)
}
