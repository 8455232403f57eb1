package clickhouse

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// lockedBuffer collects log lines written from the store's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestOutage_Logged: with Ack "log" (the default), where every batch goes
// through the spool whether ClickHouse answers or not, an outage is still
// logged once when it begins (WARN) and once when it ends, and Ready says
// how much waits in the spool without saying "store unavailable" twice.
// Before, such an outage left no line in the log (found from outside, op15).
func TestOutage_Logged(t *testing.T) {
	o := testOptions(t)
	p, dsn := newProxy(t, o.DSN)
	o.DSN = dsn
	o.Ack = AckLog
	var logs lockedBuffer
	o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s := openStore(t, o)
	stop := startTraffic(t, s, 50)
	time.Sleep(500 * time.Millisecond)
	p.setDown(true)
	var ready error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ready = s.Ready(); ready != nil && strings.Contains(logs.String(), "clickhouse: unavailable") {
			break
		}
	}
	if !errors.Is(ready, audit.ErrUnavailable) {
		t.Fatalf("Ready during the outage = %v, want ErrUnavailable", ready)
	}
	if msg := ready.Error(); strings.Count(msg, "store unavailable") != 1 || !strings.Contains(msg, "wait in the spool") {
		t.Errorf("Ready during the outage = %q, want \"store unavailable\" once and what waits in the spool", msg)
	}
	p.setDown(false)
	time.Sleep(time.Second)
	acked := stop()
	waitReady(t, s, 2*time.Minute)
	checkAcked(t, s, o, acked)
	out := logs.String()
	if n := strings.Count(out, "clickhouse: unavailable"); n != 1 || !strings.Contains(out, "level=WARN msg=\"clickhouse: unavailable") {
		t.Errorf("the outage's start was logged %d times at WARN, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "clickhouse: available again"); n != 1 {
		t.Errorf("the outage's end was logged %d times, want once:\n%s", n, out)
	}
}
