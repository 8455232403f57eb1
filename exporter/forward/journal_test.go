package forward

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
)

// answered is line(i) with a response.
func answered(i int) []byte {
	l := bytes.TrimSuffix(line(i), []byte("}\n"))
	return append(l, []byte(`,"response":{"jsonrpc":"2.0","id":`+strconv.Itoa(i)+`,"result":{"content":[]}}}`+"\n")...)
}

// crash stops f as a kill -9 would: its sender stops, its open segment
// and its journal are released (their locks freed) and nothing is sealed,
// sent or deleted.
func crash(f *Forwarder) {
	f.stop()
	<-f.done
	f.mu.Lock()
	if f.cur != nil {
		f.cur.Close()
		f.cur = nil
	}
	f.closed = true
	f.mu.Unlock()
	f.journal.mu.Lock()
	f.journal.fh.Close()
	f.journal.fh = nil
	f.journal.mu.Unlock()
}

// TestJournal: the requests a relay had in flight when it died are
// buffered by the next Forwarder on the directory, without a response.
func TestJournal(t *testing.T) {
	t.Run("restart_records_the_calls_in_flight", func(t *testing.T) {
		c := &collector{}
		srv := httptest.NewServer(c)
		defer srv.Close()
		cfg := testConfig(t, "http://127.0.0.1:1") // nothing is sent before the crash
		f1, _ := newForwarder(t, cfg)
		j := f1.Journal()
		for i := 1; i <= 3; i++ {
			j.Begin(uint64(i), bytes.TrimSuffix(line(i), []byte("\n")))
		}
		j.End(2) // its record went to a segment
		if err := f1.Add(answered(2)); err != nil {
			t.Fatal(err)
		}
		crash(f1)

		cfg.URL = srv.URL
		f2, _ := newForwarder(t, cfg)
		defer f2.Close(context.Background())
		waitFor(t, "three records", func() bool { return len(c.got()) == 3 })
		got := strings.Join(c.got(), "\n")
		for _, want := range []string{string(answered(2)), string(line(1)), string(line(3))} {
			if !strings.Contains(got, strings.TrimSuffix(want, "\n")) {
				t.Errorf("the collector got:\n%s\nwant among them:\n%s", got, want)
			}
		}
		if js := glob(t, cfg.BufferDir, "*"+journalExt); len(js) != 1 || js[0] != f2.journal.path {
			t.Errorf("journals left: %v; want only the live one %s", js, f2.journal.path)
		}
	})

	// A crash after the record is in a segment and before its "E" line:
	// the call is delivered twice, answered and not, under one call id;
	// the store keeps the answer and takes the other copy as a duplicate
	// (docs/storage.md, "An answer under a stored unanswered call").
	t.Run("crash_between_record_and_done", func(t *testing.T) {
		in := &keepIngester{}
		srv := httptest.NewServer(receiver.New(receiver.NewDefaultConfig(), dialect.Config{}, in, nil, slog.New(slog.DiscardHandler)).Handler())
		defer srv.Close()
		cfg := testConfig(t, "http://127.0.0.1:1")
		f1, _ := newForwarder(t, cfg)
		f1.Journal().Begin(7, bytes.TrimSuffix(line(7), []byte("\n")))
		if err := f1.Add(answered(7)); err != nil {
			t.Fatal(err)
		}
		crash(f1) // before End(7)

		cfg.URL = srv.URL
		f2, _ := newForwarder(t, cfg)
		defer f2.Close(context.Background())
		waitFor(t, "both copies", func() bool { return in.count() == 2 })
		in.mu.Lock()
		defer in.mu.Unlock()
		a, b := in.recs[0].Call, in.recs[1].Call
		if a.ID == "" || a.ID != b.ID || a.Responded == b.Responded {
			t.Errorf("copies: id %q responded %v, id %q responded %v; want one id, one answered copy and one not", a.ID, a.Responded, b.ID, b.Responded)
		}
	})

	// Two relays share a directory: the live one's journal is never taken;
	// the dead one's is, by the live one's sender, without a restart.
	t.Run("two_processes_share_a_dir", func(t *testing.T) {
		c := &collector{}
		srv := httptest.NewServer(c)
		defer srv.Close()
		cfg := testConfig(t, srv.URL)
		cfg.JournalScan = 20 * time.Millisecond
		a, _ := newForwarder(t, cfg)
		b, _ := newForwarder(t, cfg)
		defer b.Close(context.Background())
		a.Journal().Begin(1, bytes.TrimSuffix(line(1), []byte("\n")))
		b.Journal().Begin(2, bytes.TrimSuffix(line(2), []byte("\n")))
		time.Sleep(10 * cfg.JournalScan)
		if got := c.got(); len(got) != 0 {
			t.Fatalf("calls in flight of live relays were recorded: %v", got)
		}
		crash(a)
		waitFor(t, "a's call in flight, sent by b", func() bool { return len(c.got()) == 1 })
		if got := c.got()[0]; got != strings.TrimSuffix(string(line(1)), "\n") {
			t.Errorf("b sent %s, want a's call in flight %s", got, line(1))
		}
		if _, err := os.Stat(a.journal.path); !os.IsNotExist(err) {
			t.Errorf("a's journal is still there (%v)", err)
		}
		b.Journal().End(2)
	})

	// The journal stays bounded though a call is always in flight: it is
	// rewritten with the entries in flight only, which a crash then
	// leaves for the next start; a graceful close deletes it.
	t.Run("compacts_under_load", func(t *testing.T) {
		c := &collector{}
		srv := httptest.NewServer(c)
		defer srv.Close()
		cfg := testConfig(t, "http://127.0.0.1:1")
		f, _ := newForwarder(t, cfg)
		j := f.Journal()
		l := bytes.TrimSuffix(line(1), []byte("\n"))
		long := bytes.TrimSuffix(line(2), []byte("\n"))
		j.Begin(1<<50, long) // in flight throughout
		var biggest int64
		for i := uint64(1); i <= 2*journalCompactBytes/uint64(len(l)); i++ {
			j.Begin(i, l)
			j.End(i)
			st, err := os.Stat(j.path)
			if err != nil {
				t.Fatal(err)
			}
			biggest = max(biggest, st.Size())
		}
		if biggest > journalCompactBytes+4*int64(len(l)) {
			t.Errorf("the journal grew to %d bytes with at most two calls in flight", biggest)
		}
		if js := glob(t, cfg.BufferDir, "*"+journalExt); len(js) != 1 {
			t.Errorf("journals: %v, want one", js)
		}
		crash(f)
		cfg.URL = srv.URL
		f2, _ := newForwarder(t, cfg)
		waitFor(t, "the call in flight", func() bool { return len(c.got()) >= 1 })
		time.Sleep(50 * time.Millisecond)
		if got := c.got(); len(got) != 1 || got[0] != string(long) {
			t.Errorf("recovered %q, want only the call in flight %s", got, long)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		path := f2.Journal().path
		f2.Close(ctx)
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("a graceful close left the journal (%v)", err)
		}
	})

	// End may come before Begin (the exchange ended while its Begin was
	// on its way): nothing of it stays in flight.
	t.Run("end_before_begin", func(t *testing.T) {
		cfg := testConfig(t, "http://127.0.0.1:1")
		f, _ := newForwarder(t, cfg)
		j := f.Journal()
		j.End(1)
		j.Begin(1, bytes.TrimSuffix(line(1), []byte("\n")))
		fh, err := os.Open(j.path)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		if left, err := unfinished(fh); err != nil || len(left) != 0 {
			t.Errorf("in flight: %q (%v), want none", left, err)
		}
		crash(f)
	})
}
