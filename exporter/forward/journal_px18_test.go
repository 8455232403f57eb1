package forward

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// bySource is a collector that keeps the lines it got by the
// Mcpaudit-Source of their POST.
type bySource struct {
	mu    sync.Mutex
	lines map[string][]string
}

func (b *bySource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	zr, err := gzip.NewReader(r.Body)
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	body, _ := io.ReadAll(zr)
	ls := strings.Split(strings.TrimSpace(string(body)), "\n")
	b.mu.Lock()
	if b.lines == nil {
		b.lines = map[string][]string{}
	}
	src := r.Header.Get(Header)
	b.lines[src] = append(b.lines[src], ls...)
	b.mu.Unlock()
	w.Write([]byte(`{"accepted":` + strconv.Itoa(len(ls)) + `,"rejected":0}`))
}

func (b *bySource) of(src string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.lines[src]...)
}

// TestJournal_RecoveredUnderDeadSource (prox17): two relays on one buffer
// directory, one killed: the survivor recovers the dead one's calls in
// flight and sends them under the dead relay's source, which the journal's
// header names, and its own records under its own. Before, it sent them
// under its own source, whose clock the collector keys event time by, and
// so the answered calls of the dead relay's open segment.
func TestJournal_RecoveredUnderDeadSource(t *testing.T) {
	c := &bySource{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	cfg := testConfig(t, srv.URL)
	cfgA, cfgB := cfg, cfg
	cfgA.Source, cfgB.Source = "proxy/thegram/host:1001", "proxy/thegram/host:1002"
	a, _ := newForwarder(t, cfgA)
	b, _ := newForwarder(t, cfgB)
	a.Journal().Begin(1, bytes.TrimSuffix(line(1), []byte("\n")))
	a.stop() // its sender: the answered call stays in its open segment
	<-a.done
	if err := a.Add(answered(3)); err != nil {
		t.Fatal(err)
	}
	crash(a)
	if err := b.Add(answered(2)); err != nil {
		t.Fatal(err)
	}
	b.recoverJournals() // the sender's scan, every 5 s
	b.sealOrphans()
	waitFor(t, "the three records", func() bool { return len(c.of(cfgA.Source))+len(c.of(cfgB.Source)) == 3 })
	got, want := c.of(cfgA.Source), []string{strings.TrimSuffix(string(line(1)), "\n"), strings.TrimSuffix(string(answered(3)), "\n")}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("under the dead relay's source %s the collector got %q; want its call in flight and the answered call of its open segment %q\nunder the survivor's %s: %q",
			cfgA.Source, got, want, cfgB.Source, c.of(cfgB.Source))
	}
	if got, want := c.of(cfgB.Source), strings.TrimSuffix(string(answered(2)), "\n"); len(got) != 1 || got[0] != want {
		t.Errorf("under the survivor's source the collector got %q; want only its own record %s", got, want)
	}
	b.Close(context.Background())
	if left := glob(t, cfg.BufferDir, "*"); len(left) != 1 || !strings.HasSuffix(left[0], rejectDir) {
		t.Errorf("left in the buffer dir: %v; want only %s/", left, rejectDir)
	}
}

// TestJournal_CleanStopLeavesNoJournal (prox17): a relay killed just after
// its start, before any call, left an empty journal that the next relay
// took for one not yet locked by a live process and skipped for a minute;
// stopped cleanly within it, that relay left it behind. A journal is now
// headed and locked before it has its name, and a clean stop takes the
// journals of dead relays and removes its own.
func TestJournal_CleanStopLeavesNoJournal(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	cfg := testConfig(t, srv.URL)
	a, _ := newForwarder(t, cfg)
	crash(a)
	b, _ := newForwarder(t, cfg)
	if err := b.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
	for _, pat := range []string{"*" + journalExt, "*" + journalNewExt} {
		if js := glob(t, cfg.BufferDir, pat); len(js) != 0 {
			t.Errorf("after a clean stop, journals left: %v; want none", js)
		}
	}
}

// TestJournal_Bounded (prox17): the calls in flight a journal holds are
// bounded by a share of MaxBufferBytes (journalShare): a huge request, or
// a huge number of calls in flight, no longer grows it without limit. A
// call past the bound is not journaled and counted as unjournaled; its
// record is buffered when its exchange ends, as without a journal.
func TestJournal_Bounded(t *testing.T) {
	cfg := testConfig(t, "http://127.0.0.1:1")
	cfg.MaxBufferBytes = 64 << 10
	bound := cfg.MaxBufferBytes / journalShare
	f, reg := newForwarder(t, cfg)
	defer f.Close(context.Background())
	j := f.Journal()
	huge := bytes.Replace(bytes.TrimSuffix(line(1), []byte("\n")), []byte(`"path":"a"`), []byte(`"path":"`+strings.Repeat("x", 10<<20)+`"`), 1)
	j.Begin(1, huge)
	l := bytes.TrimSuffix(line(2), []byte("\n"))
	const n = 1000
	for i := uint64(2); i < n; i++ {
		j.Begin(i, l)
	}
	st, err := os.Stat(j.path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > bound+int64(len(journalHeader(cfg.Source))) {
		t.Errorf("journal of %d bytes with a 10 MiB request and %d calls in flight; want at most the bound, %d bytes (MaxBufferBytes %d / %d)",
			st.Size(), n-1, bound, cfg.MaxBufferBytes, journalShare)
	}
	journaled := len(j.open)
	if got, want := counter(t, reg, "mcpaudit_proxy_forward_records_total", "unjournaled"), float64(n-1-journaled); got != want || journaled == 0 {
		t.Errorf("unjournaled %v with %d of %d calls journaled; want %v", got, journaled, n-1, want)
	}
	for i := uint64(1); i < n; i++ {
		j.End(i)
	}
	if len(j.skip) != 0 || len(j.open) != 0 || len(j.early) != 0 {
		t.Errorf("after every call ended: %d skipped, %d open, %d early entries kept; want none", len(j.skip), len(j.open), len(j.early))
	}
}
