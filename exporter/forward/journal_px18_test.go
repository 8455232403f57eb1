package forward

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
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
