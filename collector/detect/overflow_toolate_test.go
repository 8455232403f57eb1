package detect

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestOverflow_TooLateSenders: calls of senders a partition has no room
// for (Config.MaxSources) that come too late are counted under the
// overflow source, whose status names their senders, the latest few, the
// most recent first, each once: the calls are stored under those names,
// and the overflow source's is no sender's.
func TestOverflow_TooLateSenders(t *testing.T) {
	cfg := NewDefaultConfig()
	cfg.MaxSources = 1
	e := NewEngine(cfg, countFindings(func() {}))
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	t0 := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	id := 0
	add := func(src string, at, wall time.Time) {
		id++
		line := fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d/a.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"d/a.gram","rev":4,"hash":"bb"}}}}`,
			at.Format(time.RFC3339Nano), id, id)
		e.Add(src, leanRecord(t, rd, line), wall)
	}
	overflow := func(wall time.Time) SourceStatus {
		t.Helper()
		for _, ps := range e.Status(wall) {
			for _, s := range ps.Sources {
				if s.Overflow {
					return s
				}
			}
		}
		t.Fatalf("no overflow source in the status")
		return SourceStatus{}
	}
	// pod-a has the partition's one place; pod-b overflows; both on time
	// move the watermark to the wall clock less the lateness bound.
	wall := t0
	for ; wall.Before(t0.Add(time.Minute)); wall = wall.Add(time.Second) {
		add("otlp:thegram/pod-a/node-1", wall, wall)
		add("otlp:thegram/pod-b/node-1", wall, wall)
	}
	if s := overflow(wall); s.TooLate != 0 || len(s.TooLateSenders) != 0 {
		t.Fatalf("overflow source: %d too late from %q; want none yet", s.TooLate, s.TooLateSenders)
	}
	late := t0.Add(-cfg.AllowedLateness - time.Minute)
	f := func(src string, want ...string) {
		t.Helper()
		add(src, late, wall)
		s := overflow(wall)
		if s.Name != OverflowSource {
			t.Errorf("overflow source named %q; want %q", s.Name, OverflowSource)
		}
		if !slices.Equal(s.TooLateSenders, want) {
			t.Errorf("after a call of %s too late: too_late_senders %q; want %q", src, s.TooLateSenders, want)
		}
	}
	f("otlp:thegram/pod-c/node-2", "otlp:thegram/pod-c/node-2")
	f("otlp:thegram/pod-b/node-1", "otlp:thegram/pod-b/node-1", "otlp:thegram/pod-c/node-2")
	f("otlp:thegram/pod-c/node-2", "otlp:thegram/pod-c/node-2", "otlp:thegram/pod-b/node-1")
	// More senders than are kept: the latest, the oldest dropped.
	want := []string{"otlp:thegram/pod-c/node-2", "otlp:thegram/pod-b/node-1"}
	for i := range TooLateSendersKept + 2 {
		src := fmt.Sprintf("calls:poster-%d", i)
		want = append([]string{src}, want...)
		f(src, want[:min(len(want), TooLateSendersKept)]...)
	}
	// A source with a place of its own is named by itself, never listed.
	add("otlp:thegram/pod-a/node-1", late, wall)
	if s := overflow(wall); slices.Contains(s.TooLateSenders, "otlp:thegram/pod-a/node-1") {
		t.Errorf("too_late_senders %q names a source with its own place", s.TooLateSenders)
	}
	if s := overflow(wall); s.TooLate != int64(3+TooLateSendersKept+2) {
		t.Errorf("overflow source: %d too late; want %d", s.TooLate, 3+TooLateSendersKept+2)
	}
}
