package api_test

import (
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestStatus_HeldByIsWhatTheWatermarkFollows: with a real engine, a pod
// on time and a pod whose clock is 2 hours slow (joined after the first:
// its calls are too late and it holds nothing back), the status names the
// on-time pod as the source the partition waits for. Found from outside:
// `mcpaudit status` said HELD BY otlp:thegram/slow2h, the source with the
// earliest clock, while the watermark followed the on-time pod, so an
// operator looking for what held thegram back was sent to the wrong pod.
func TestStatus_HeldByIsWhatTheWatermarkFollows(t *testing.T) {
	e := detect.NewEngine(detect.NewDefaultConfig())
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	add := func(src string, at time.Time, id int, wall time.Time) {
		e.Add(src, gramRead(t, rd, at, id), wall)
	}
	wall := time.Date(2026, 12, 4, 14, 33, 40, 0, time.UTC)
	id := 0
	for i := range 60 {
		id++
		add("otlp:thegram/on-time", wall.Add(-time.Second), id, wall)
		if i >= 30 {
			id++
			add("otlp:thegram/slow2h", wall.Add(-2*time.Hour), id, wall)
		}
		wall = wall.Add(time.Second)
		e.Tick(wall)
	}
	parts := e.Status(wall)
	if len(parts) != 1 || parts[0].TooLate != 30 {
		t.Fatalf("status %+v: want one partition with the slow pod's 30 calls too late", parts)
	}
	got := statusOf(t, parts)
	if h := got.Partitions[0].HeldBy; h != "otlp:thegram/on-time" {
		t.Errorf("held_by %q, want otlp:thegram/on-time (the source 2 h behind holds nothing back)", h)
	}
}
