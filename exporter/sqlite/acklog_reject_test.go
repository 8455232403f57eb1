package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestAckLog_SetAsideForgotten: a frame that the drain of a running store
// sets aside (its bytes on disk damaged after the append was acknowledged)
// no longer counts as pending nor in the backlog once the log is empty:
// the same calls sent again are new, as with ack "commit". Before, they
// were counted as not new although nothing held them, and the backlog
// never went back to 0 (found by the adversarial pass of 2026-12-02).
func TestAckLog_SetAsideForgotten(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "audit.db")
	// MaxBatch 1: the spool keeps 8 rows in memory, so a frame of 10 is read back from its file.
	s, err := Open(path, Options{Ack: AckLog, MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := records(t, 10)

	s.clog.gate.Lock() // hold the drain
	n, err := s.AppendCalls(ctx, recs)
	if err != nil || n != 10 {
		t.Fatalf("first append: %d, %v", n, err)
	}
	segs, _ := filepath.Glob(filepath.Join(LogDir(path), "*.log"))
	var seg string
	var size int64
	for _, p := range segs {
		if fi, _ := os.Stat(p); fi.Size() > size {
			seg, size = p, fi.Size()
		}
	}
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	f.ReadAt(b, size/2)
	b[0] ^= 0x5a
	f.WriteAt(b, size/2)
	f.Close()
	s.clog.gate.Unlock()

	deadline := time.Now().Add(hangCeiling)
	for {
		if fr, _ := s.LogUsage(); fr == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the drain did not take the frame")
		}
		time.Sleep(10 * time.Millisecond)
	}
	rej, _ := filepath.Glob(filepath.Join(LogDir(path), "*.rejected"))
	s.clog.mu.Lock()
	backlog, pending := s.clog.backlog, len(s.clog.pending)
	s.clog.mu.Unlock()
	t.Logf("after the drain set the frame aside (%v): backlog %d, pending keys %d", rej, backlog, pending)

	// With ack "commit" (or a store that reopened), these 10 calls are new: none is stored.
	n2, err := s.AppendCalls(ctx, recs)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.caughtUp(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	var stored int
	s.w.QueryRow(`SELECT count(*) FROM calls`).Scan(&stored)
	s.clog.mu.Lock()
	backlog = s.clog.backlog
	s.clog.mu.Unlock()
	t.Logf("second append of the same 10 calls: counted new %d, stored now %d, backlog %d", n2, stored, backlog)
	if n2 != stored || backlog != 0 {
		t.Errorf("counted %d new, but the append stored %d (commit would count %d); backlog left at %d", n2, stored, stored, backlog)
	}
}

// TestAckLog_SetAsideDoNotWedge: frames set aside at run time that hold
// maxBacklog calls together must not make every later append wait
// LogWait and be refused, with nothing left in the log (they did, until
// the store was reopened).
func TestAckLog_SetAsideDoNotWedge(t *testing.T) {
	defer func(m int) { maxBacklog = m }(maxBacklog)
	maxBacklog = 20 // a stand-in for 32,768: two frames of 10 set aside
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{Ack: AckLog, MaxBatch: 1, LogWait: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := records(t, 40)
	for round := 0; round < 2; round++ {
		s.clog.gate.Lock()
		if _, err := s.AppendCalls(ctx, recs[round*10:round*10+10]); err != nil {
			t.Fatal(err)
		}
		segs, _ := filepath.Glob(filepath.Join(LogDir(path), "*.log"))
		for _, p := range segs {
			fi, _ := os.Stat(p)
			if fi.Size() == 0 {
				continue
			}
			f, _ := os.OpenFile(p, os.O_RDWR, 0)
			b := make([]byte, 1)
			f.ReadAt(b, fi.Size()-5)
			b[0] ^= 0x5a
			f.WriteAt(b, fi.Size()-5)
			f.Close()
		}
		s.clog.gate.Unlock()
		for deadline := time.Now().Add(hangCeiling); ; time.Sleep(10 * time.Millisecond) {
			if fr, _ := s.LogUsage(); fr == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the drain did not take the frame")
			}
		}
	}
	fr, by := s.LogUsage()
	_, err = s.AppendCalls(ctx, recs[30:31])
	t.Logf("log holds %d frames, %d bytes; a fresh append of 1 call: %v", fr, by, err)
	if err != nil {
		t.Errorf("an empty call log refuses appends: %v", err)
	}
}

// TestAckLog_RefusedFrameIsolated: when SQLite refuses a transaction of
// several frames for good, the drain commits them one at a time, sets the
// one refused aside, stores the others, and counts the fault; it used to
// retry the same transaction forever, storing nothing after it.
func TestAckLog_RefusedFrameIsolated(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{Ack: AckLog})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := records(t, 50)
	bad := fmt.Sprint(packID(callPrefix, recs[25].Call.ID)) // in the third frame
	s.clog.gate.Lock()
	for i := 0; i < len(recs); i += 10 {
		if _, err := s.AppendCalls(ctx, recs[i:i+10]); err != nil {
			t.Fatal(err)
		}
	}
	var tries atomic.Int64
	s.clog.refuse = func(rows []callRow) error {
		tries.Add(1)
		for _, r := range rows {
			if fmt.Sprint(r.id) == bad {
				return errors.New("refused for good")
			}
		}
		return nil
	}
	s.clog.gate.Unlock()
	for deadline := time.Now().Add(hangCeiling); ; time.Sleep(10 * time.Millisecond) {
		if fr, _ := s.LogUsage(); fr == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the drain still holds frames after %d tries: it retries the refused transaction", tries.Load())
		}
	}
	if n := count(t, s); n != 40 {
		t.Errorf("%d calls stored, want the 40 of the four frames not refused", n)
	}
	if n := s.SpoolFilesRejected(); n != 1 {
		t.Errorf("SpoolFilesRejected = %d, want 1", n)
	}
	if rej, _, err := s.SpoolFilesSetAside(); err != nil || rej != 1 {
		t.Errorf("SpoolFilesSetAside = %d, %v; want 1 rejected", rej, err)
	}
	// Later frames go in transactions of many again.
	s.clog.gate.Lock()
	for i := 0; i < 20; i += 10 {
		if _, err := s.AppendCalls(ctx, records(t, 70)[50+i:60+i]); err != nil {
			t.Fatal(err)
		}
	}
	before := tries.Load()
	s.clog.gate.Unlock()
	if err := s.caughtUp(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if n := tries.Load() - before; n != 1 {
		t.Errorf("two frames after the refused one took %d transactions, want 1", n)
	}
}

// TestAckLog_Ready: while the drain fails, the store is not ready, and
// says how much acknowledged waits; it is again once the drain succeeds.
// The failure is set as the drain sets it (a SQLite lock held past the
// 10 s busy timeout would show the same, slowly).
func TestAckLog_Ready(t *testing.T) {
	s := openTemp(t, Options{Ack: AckLog})
	defer s.Close()
	if err := s.Ready(); err != nil {
		t.Fatalf("a fresh store: %v", err)
	}
	s.clog.gate.Lock()
	if _, err := s.AppendCalls(t.Context(), records(t, 10)); err != nil {
		t.Fatal(err)
	}
	if used, limit := s.SpoolUsage(); used == 0 || limit != 1<<30 {
		t.Errorf("SpoolUsage = %d, %d; want the frame's bytes and 1 GiB", used, limit)
	}
	s.signalProgress(fmt.Errorf("cannot apply the call log: %w", audit.ErrUnavailable))
	err := s.Ready()
	if !errors.Is(err, audit.ErrUnavailable) || !strings.Contains(err.Error(), "1 frames") {
		t.Errorf("Ready with the drain failing = %v, want unavailable naming the frames waiting", err)
	}
	s.clog.gate.Unlock()
	if err := s.caughtUp(t.Context(), "test"); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err != nil {
		t.Errorf("Ready after the drain went on: %v", err)
	}
	if used, _ := s.SpoolUsage(); used != 0 {
		t.Errorf("SpoolUsage after the drain = %d, want 0", used)
	}
	c := openTemp(t, Options{})
	defer c.Close()
	if used, limit := c.SpoolUsage(); used != 0 || limit != 0 {
		t.Errorf("ack commit: SpoolUsage = %d, %d; want no log", used, limit)
	}
}
