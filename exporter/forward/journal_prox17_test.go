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
// is masked, so only the tool's arguments as masked linger.
func TestJournal_EndedRequestNotKeptOnDisk(t *testing.T) {
	t.Skip("prox17 finding, not fixed: the journal keeps the B lines of ended calls below 1 MiB, raw ones included with --redact=false")
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
