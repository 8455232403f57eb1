package forward

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"testing"
)

// TestJournal_EndedRequestNotKeptOnDisk (prox17): once a call's exchange
// ended and its record was delivered, its request is in no file of the
// buffer directory. With --redact=false the journal's "B" line is the raw
// request: prox17 ran a real `mcpaudit proxy --redact=false`, sent one
// tools/call whose arguments held "password=hunter2", waited 4 s (record
// delivered, segment deleted) and found hunter2 still in the live
// journal; it stays there until the journal passes 1 MiB (a quiet relay:
// days) or the relay stops gracefully. With the default --redact the line
// is masked, so only the tool's arguments as masked lingered. The journal
// is now emptied whenever nothing is in flight.
func TestJournal_EndedRequestNotKeptOnDisk(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	f, _ := newForwarder(t, testConfig(t, srv.URL))
	defer f.Close(context.Background())
	secret := []byte("password=hunter2")
	req := bytes.Replace(bytes.TrimSuffix(line(1), []byte("\n")), []byte(`"path":"a"`), []byte(`"path":"a","content":"`+string(secret)+`"`), 1)
	j := f.Journal()
	j.Begin(1, req)
	if err := f.Add(append(append([]byte(nil), req...), '\n')); err != nil {
		t.Fatal(err)
	}
	j.End(1)
	waitFor(t, "the record delivered", func() bool { return len(c.got()) == 1 })
	b, err := os.ReadFile(j.path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, secret) {
		t.Errorf("journal %s (%d bytes) still holds the ended, delivered call's request with %q: nothing is in flight", j.path, len(b), secret)
	}
}

// BenchmarkJournal_BeginEnd is the journal's work for one call of a relay
// with one call in flight at a time: its B line, then its end (a relay
// idle after each call).
func BenchmarkJournal_BeginEnd(b *testing.B) {
	f, _ := newForwarder(b, testConfig(b, "http://127.0.0.1:1"))
	defer f.Close(context.Background())
	req := bytes.TrimSuffix(line(1), []byte("\n"))
	j := f.Journal()
	b.ResetTimer()
	for i := range b.N {
		j.Begin(uint64(i+1), req)
		j.End(uint64(i + 1))
	}
}
