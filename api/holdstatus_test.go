package api_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestStatus_RestartHold: with a real engine whose partition is held
// after a restart (detect.Engine.HoldAfterRestart), the status answer
// gives held_until and held_at for that partition while the hold is in
// force, and neither once it is over; the other fields of a partition
// stay as they were.
func TestStatus_RestartHold(t *testing.T) {
	cfg := detect.NewDefaultConfig()
	e := detect.NewEngine(cfg)
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	wall := time.Date(2026, 12, 4, 15, 40, 0, 0, time.UTC)
	id := 0
	live := func(n int) {
		for range n {
			id++
			e.Add("otlp:thegram/pod-0", gramRead(t, rd, wall.Add(-time.Second), id), wall)
			wall = wall.Add(time.Second)
			e.Tick(wall)
		}
	}
	live(60)
	at, until := wall.Add(-time.Second), wall.Add(40*time.Second)
	e.HoldAfterRestart(detect.PartitionKey{Server: "thegram"}, at, until)
	partition := func() map[string]any {
		t.Helper()
		body := statusBody(t, e.Status(wall))
		var got struct {
			Partitions []map[string]any `json:"partitions"`
		}
		if err := json.Unmarshal(body, &got); err != nil || len(got.Partitions) != 1 {
			t.Fatalf("%v: %s", err, body)
		}
		return got.Partitions[0]
	}
	keys := func(m map[string]any) []string {
		var k []string
		for n := range m {
			k = append(k, n)
		}
		slices.Sort(k)
		return k
	}
	// What a partition told before the hold was shown (and, since
	// 2026-12-05, pending_writes, always there; pending_until only while
	// some are; and clock_behind, beside clock_ahead; and since op20b behind, always there).
	old := []string{"acknowledged", "behind", "buffered", "calls", "clock_ahead", "clock_behind", "held_by", "id_collisions", "lag_seconds", "late", "pending_writes", "server", "sources", "tenant", "too_late", "watermark"}

	live(20)
	p := partition()
	if p["held_until"] != until.Format(time.RFC3339Nano) || p["held_at"] != at.Add(-cfg.Lateness).Format(time.RFC3339Nano) {
		t.Errorf("during the hold: held_until %v, held_at %v; want %s, %s", p["held_until"], p["held_at"],
			until.Format(time.RFC3339Nano), at.Add(-cfg.Lateness).Format(time.RFC3339Nano))
	}
	if got, want := keys(p), slices.Sorted(slices.Values(append(slices.Clone(old), "held_at", "held_until"))); !slices.Equal(got, want) {
		t.Errorf("during the hold: fields %v, want %v", got, want)
	}
	if b, _ := p["buffered"].(float64); b < 15 {
		t.Fatalf("during the hold: %v calls waiting, want the 20 delivered since the restart", p["buffered"])
	}

	live(20)
	p = partition()
	if got := keys(p); !slices.Equal(got, old) {
		t.Errorf("after the hold (at %s, hold until %s): fields %v, want %v", wall, until, got, old)
	}
}
