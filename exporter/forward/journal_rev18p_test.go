package forward

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestJournal_DeadSegmentSealedByAThirdRelay (rev18p): relays A, B and C on
// one directory, A killed. B takes A's journal and seals A's open segment
// under A's source; C's scan, which found A's journal locked by B's
// recovery (or ran before it), seals A's open segment in the meantime
// with no source beside it: A's answered call goes out under C's source,
// the case prox17 set out to end.
func TestJournal_DeadSegmentSealedByAThirdRelay(t *testing.T) {
	col := &bySource{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	cfg := testConfig(t, srv.URL)
	cfgA, cfgB, cfgC := cfg, cfg, cfg
	cfgA.Source, cfgB.Source, cfgC.Source = "proxy/thegram/host:1001", "proxy/thegram/host:1002", "proxy/thegram/host:1003"
	a, _ := newForwarder(t, cfgA)
	b, _ := newForwarder(t, cfgB)
	c, _ := newForwarder(t, cfgC)
	defer b.Close(context.Background())
	defer c.Close(context.Background())
	a.Journal().Begin(1, bytes.TrimSuffix(line(1), []byte("\n")))
	a.stop() // its sender: the answered call stays in its open segment
	<-a.done
	if err := a.Add(answered(3)); err != nil {
		t.Fatal(err)
	}
	crash(a)
	c.sealOrphans() // C's scan while B holds A's journal
	b.recoverJournals()
	b.sealOrphans()
	waitFor(t, "the two records of A", func() bool {
		return len(col.of(cfgA.Source))+len(col.of(cfgB.Source))+len(col.of(cfgC.Source)) == 2
	})
	if got := col.of(cfgA.Source); len(got) != 2 {
		t.Errorf("under the dead relay's source %s the collector got %q; want its call in flight and its answered call 3\nunder B's %q, under C's %q",
			cfgA.Source, got, col.of(cfgB.Source), col.of(cfgC.Source))
	}
}

// TestJournal_SamePidDeadRelaysKeepTheirSources (rev18p): two dead relays
// with one pid (each relay is pid 1 in its container; in this test all
// forwarders share the test's pid) both leave an answered call in their
// open segment. The recovery of the first journal seals the open segments
// of both under the first relay's source: sealOrphansOf matches by pid
// alone.
func TestJournal_SamePidDeadRelaysKeepTheirSources(t *testing.T) {
	col := &bySource{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	cfg := testConfig(t, srv.URL)
	cfgA, cfgB, cfgC := cfg, cfg, cfg
	cfgA.Source, cfgB.Source, cfgC.Source = "proxy/thegram/pod-a:8080", "proxy/thegram/pod-b:8080", "proxy/thegram/pod-c:8080"
	a, _ := newForwarder(t, cfgA)
	c, _ := newForwarder(t, cfgC)
	for i, f := range []*Forwarder{a, c} {
		f.stop()
		<-f.done
		if err := f.Add(answered(10 + i)); err != nil {
			t.Fatal(err)
		}
		crash(f)
	}
	b, _ := newForwarder(t, cfgB) // recovers both journals at its start
	defer b.Close(context.Background())
	waitFor(t, "the two answered calls", func() bool {
		return len(col.of(cfgA.Source))+len(col.of(cfgB.Source))+len(col.of(cfgC.Source)) == 2
	})
	wantA, wantC := strings.TrimSuffix(string(answered(10)), "\n"), strings.TrimSuffix(string(answered(11)), "\n")
	if got := col.of(cfgA.Source); len(got) != 1 || got[0] != wantA {
		t.Errorf("under %s the collector got %q; want only A's answered call", cfgA.Source, got)
	}
	if got := col.of(cfgC.Source); len(got) != 1 || got[0] != wantC {
		t.Errorf("under %s the collector got %q; want only C's answered call %s", cfgC.Source, got, wantC)
	}
}

// TestForwarder_CorruptSourceFileDoesNotBlock (rev18p): a .source file
// with a control character (a torn or corrupt write) made every POST of
// its segment fail in the HTTP client ("invalid header field value"), and
// as segments go oldest first, no later record was ever sent: the whole
// buffer stuck behind one file. Its records go under the sender's own
// source instead.
func TestForwarder_CorruptSourceFileDoesNotBlock(t *testing.T) {
	col := &bySource{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	cfg := testConfig(t, srv.URL)
	old := filepath.Join(cfg.BufferDir, fmt.Sprintf("%020d-1-1", 1))
	if err := os.WriteFile(old+sealedExt, answered(1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old+sourceExt, []byte("proxy/thegram/host:1001\n\x00\x01"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := newForwarder(t, cfg)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		f.Close(ctx)
	}()
	if err := f.Add(answered(2)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both records", func() bool { return len(col.of(cfg.Source)) == 2 })
}

// TestJournal_DeadJournalNewRemovedAtCleanStop (rev18p): a relay killed
// between creating its .journal.new and naming it leaves it; the next
// relay, stopped cleanly within the minute, left it behind: the prox17
// case of the empty journal, moved to .journal.new. Its process is gone
// (the pid in its name is no process), so it goes once 5 s old.
func TestJournal_DeadJournalNewRemovedAtCleanStop(t *testing.T) {
	cfg := testConfig(t, "http://127.0.0.1:1")
	dead := filepath.Join(cfg.BufferDir, fmt.Sprintf("%020d-%d%s", time.Now().UnixNano(), 1<<30, journalNewExt))
	if err := os.WriteFile(dead, journalHeader("proxy/thegram/host:1001"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Killed 10 s before this relay's start and stop.
	if ago := time.Now().Add(-10 * time.Second); os.Chtimes(dead, ago, ago) != nil {
		t.Fatal("cannot age the file")
	}
	f, _ := newForwarder(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	f.Close(ctx)
	if left := glob(t, cfg.BufferDir, "*"+journalNewExt); len(left) != 0 {
		t.Errorf("after a clean stop, left %v of a dead relay; want none", left)
	}
}

// TestForwarder_StopCountsOnlyWhatIsLeft (rev18p): two relays on one
// directory, the collector up. A stops with everything of its own sent;
// its last line said "call records left in the buffer for the next start"
// (WARN) with the bytes of B's open segment, which B, alive, sends itself.
func TestForwarder_StopCountsOnlyWhatIsLeft(t *testing.T) {
	col := &bySource{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	cfg := testConfig(t, srv.URL)
	a, _ := newForwarder(t, cfg)
	b, _ := newForwarder(t, cfg)
	defer crash(b) // its sender is stopped: a Close would wait for it
	b.stop()       // B's record stays in its open segment
	<-b.done
	if err := b.Add(answered(1)); err != nil {
		t.Fatal(err)
	}
	if err := a.Add(answered(2)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st := a.Stop(ctx)
	if st.LeftBytes != 0 || st.Sent != 1 {
		t.Errorf("A stopped with %d records sent and %d bytes left; want 1 sent, 0 left (B's open segment is B's)", st.Sent, st.LeftBytes)
	}
}

// TestJournal_BoundedOverManyCycles (rev18p, held on px18): 8 goroutines
// begin and end calls for a long while, with always some in flight and the
// bound often reached: the file never passes what the bound's comment
// promises (twice the bound plus journalCompactBytes, and one line), every
// call is journaled or counted unjournaled, and nothing stays kept.
func TestJournal_BoundedOverManyCycles(t *testing.T) {
	cfg := testConfig(t, "http://127.0.0.1:1")
	cfg.MaxBufferBytes = 256 << 10
	bound := cfg.MaxBufferBytes / journalShare
	f, reg := newForwarder(t, cfg)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		f.Close(ctx)
	}()
	j := f.Journal()
	l := bytes.TrimSuffix(line(1), []byte("\n"))
	const workers, per = 8, 3000
	var maxSize atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []uint64
			for i := range per {
				e := uint64(w*per + i + 1)
				j.Begin(e, l)
				mine = append(mine, e)
				if len(mine) > 200 { // up to 200 in flight each: past the bound at times
					j.End(mine[0])
					mine = mine[1:]
				}
				if st, err := os.Stat(j.path); err == nil {
					for {
						m := maxSize.Load()
						if st.Size() <= m || maxSize.CompareAndSwap(m, st.Size()) {
							break
						}
					}
				}
			}
			for _, e := range mine {
				j.End(e)
			}
		}()
	}
	wg.Wait()
	if limit := 2*bound + journalCompactBytes + int64(len(l)) + 64; maxSize.Load() > limit {
		t.Errorf("journal grew to %d bytes; want at most %d (bound %d)", maxSize.Load(), limit, bound)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.open)+len(j.skip)+len(j.early) != 0 || j.live != 0 {
		t.Errorf("after every call ended: open %d skip %d early %d live %d; want none", len(j.open), len(j.skip), len(j.early), j.live)
	}
	if got := counter(t, reg, "mcpaudit_proxy_forward_records_total", "unjournaled"); got == 0 {
		t.Errorf("unjournaled %v; want some: the test did not reach the bound", got)
	}
}

// TestConfig_ValidateSource (rev18p): a source the collector refuses, or
// that no HTTP request can carry, is refused at the start: before, a
// relay with --source holding a newline started, and every POST failed in
// the HTTP client, forever (its records, and with px18 a dead relay's
// recovered records under its journal's header, stuck in the buffer); one
// longer than the collector's 256 bytes had every segment set aside.
func TestConfig_ValidateSource(t *testing.T) {
	f := func(source string, ok bool) {
		t.Helper()
		cfg := NewDefaultConfig()
		cfg.URL, cfg.Source, cfg.BufferDir = "http://127.0.0.1:4318", source, "d"
		if err := cfg.Validate(); (err == nil) != ok {
			t.Errorf("Validate with source %q: %v; want ok %v", source, err, ok)
		} else if err != nil && !strings.Contains(err.Error(), "forward.source") {
			t.Errorf("Validate with source %q: %v; want it to name forward.source", source, err)
		}
	}
	f("proxy/thegram/host:4000", true)
	f("proxy/thé-gram/hôte:4000", true)
	f(strings.Repeat("x", 256), true)
	f(strings.Repeat("x", 257), false)
	f("proxy/thegram\nhost", false)
	f("proxy/thegram\x00", false)
	f("proxy/\xff\xfe", false)
}

// TestForwarder_StopCountsDropped (rev18p): records dropped (the buffer
// full; on a real full tmpfs, 26 of 40 answered calls) are counted in what
// Stop says, so that the relay's last line does not read "records left"
// alone, or "stopped cleanly".
func TestForwarder_StopCountsDropped(t *testing.T) {
	col := &bySource{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	cfg := testConfig(t, srv.URL)
	cfg.MaxBufferBytes = int64(len(answered(1))) + 10
	f, _ := newForwarder(t, cfg)
	f.stop() // nothing sent: the buffer stays full
	<-f.done
	if err := f.Add(answered(1)); err != nil {
		t.Fatal(err)
	}
	if err := f.Add(answered(2)); err == nil {
		t.Fatal("Add past the bound: nil error; want ErrBufferFull")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if st := f.Stop(ctx); st.Dropped != 1 {
		t.Errorf("Stop says %d records dropped; want 1", st.Dropped)
	}
}

// TestForwarder_SegmentTakenBeforeItsLock (rev18p): a segment is created,
// then locked; another relay's scan that comes in between finds it
// unlocked and empty, takes it for a dead relay's and deletes it. The
// relay then locked the deleted file and wrote its records there: Add
// returned nil (the agent had its answer) and the records were lost.
func TestForwarder_SegmentTakenBeforeItsLock(t *testing.T) {
	col := &bySource{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	cfg := testConfig(t, srv.URL)
	a, _ := newForwarder(t, cfg)
	b, _ := newForwarder(t, cfg)
	defer b.Close(context.Background())
	once := true
	testHookSegmentCreated = func(string) {
		if once {
			once = false
			b.sealOrphans() // B's scan, in the instant before A's lock
		}
	}
	defer func() { testHookSegmentCreated = nil }()
	if err := a.Add(answered(1)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	a.Stop(ctx)
	if got := col.of(cfg.Source); len(got) != 1 {
		t.Errorf("the collector got %q; want the record Add took", got)
	}
}
