package pipeline_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestRestart_NoStateFileHolds: a data directory whose state file
// (partitions.json) is lost while its store holds calls still holds each
// partition with stored calls after a restart, for restart_grace +
// idle_timeout (40 s; the downtime is unknown), at its last stored call:
// a sender's backlog may come after any outage, out of order. A new data
// directory holds nothing. A damaged state file is as one lost.
//
// Two pods of thegram deliver live; a write (sync pending) 4m30s before
// the stop is read synced 3 s after it, in the oldest request of the
// queue. The collector is down 3 minutes and its state file is lost; the
// backlog comes at once but for its first 5 s, 20 s later. Without the
// hold the backlog took the watermark 3 minutes on, the oldest request
// came too late to be judged (past allowed_lateness) and the write's
// window closed without its read (a false unverified_write).
func TestRestart_NoStateFileHolds(t *testing.T) {
	for name, lose := range map[string]func(path string) error{
		"removed": os.Remove,
		"damaged": func(path string) error { return os.WriteFile(path, []byte(`{"version":2,"partitions":[`), 0o644) },
	} {
		t.Run(name, func(t *testing.T) { testNoStateFileHolds(t, lose) })
	}
}

func testNoStateFileHolds(t *testing.T, lose func(path string) error) {
	p := newPods(t)
	thegram := detect.PartitionKey{Server: "thegram"}
	p.live(1)
	if st := p.r.status()[thegram]; !st.HeldUntil.IsZero() {
		t.Errorf("a new data directory holds its partition until %s", st.HeldUntil)
	}
	p.live(29)
	queue := p.stopWithWrite(3 * time.Minute)
	if err := lose(filepath.Join(p.dir, "partitions.json")); err != nil {
		t.Fatal(err)
	}
	p.clock.Add(3 * time.Minute)
	p.restart()
	restart := p.clock.Now()
	for _, want := range []string{"no state file while the store holds calls", "downtime=unknown", "hold=40s"} {
		if !strings.Contains(p.r.logs.String(), want) {
			t.Errorf("the start-up log does not say %q:\n%s", want, p.r.logs.String())
		}
	}
	if st := p.r.status()[thegram]; st.HeldUntil.Before(restart.Add(40*time.Second)) || st.HeldUntil.After(restart.Add(41*time.Second)) {
		t.Errorf("status after the restart: held until %s, want 40 s after the restart (%s)", st.HeldUntil, restart.Add(40*time.Second))
	}
	p.retry(queue, 20)
	if st := p.settled(2*(30+5+180+20+30) + 2); !st.HeldUntil.IsZero() {
		t.Errorf("still held until %s, 50 s after the restart", st.HeldUntil)
	}
}
