package detect_test

import (
	"sort"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// TestExpireIdle: partitions whose servers went quiet are removed once
// they hold nothing, and a server coming back later starts afresh with the
// same findings as an engine that never removed anything. A partition with
// a write still in its window is kept.
func TestExpireIdle(t *testing.T) {
	cfg := detect.NewDefaultConfig()
	c := capgen.Generate(capgen.Config{Seed: 5, Sessions: 300, Span: 10 * time.Minute, AnomalyRate: 0.35})
	recs := readRecords(t, c.Lines)
	// The same traffic again three hours later, under other call ids.
	var ds []delivered
	for round := range 2 {
		shift := time.Duration(round) * 3 * time.Hour
		for _, r := range recs {
			cp := *r
			call := *r.Call
			call.Time = call.Time.Add(shift)
			call.ID = call.ID + "-" + string(rune('a'+round))
			call.Fingerprint = call.Fingerprint + string(rune('a'+round))
			cp.Call = &call
			ds = append(ds, delivered{&cp, "post-" + r.Call.Server, call.Time.Add(time.Second)})
		}
	}
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].wall.Before(ds[j].wall) })

	// gens holds, by server, the Gen of each partition it had.
	gens := map[string]map[uint64]bool{}
	run := func(expire bool) (*outcome, int, []int) {
		o := newOutcome()
		e := detect.NewEngine(cfg, outcomeSink{o})
		e.DropRepeatedIDs()
		var tick time.Time
		removed := 0
		var sizes []int
		step := func(now time.Time) {
			e.Tick(now)
			if expire && now.Sub(tick.Truncate(time.Minute)) < time.Second {
				removed += len(e.ExpireIdle(now, cfg.IdleTimeout))
				sizes = append(sizes, e.Partitions())
				for _, ps := range e.Status(now) {
					if gens[ps.Server] == nil {
						gens[ps.Server] = map[uint64]bool{}
					}
					gens[ps.Server][ps.Gen] = true
				}
			}
		}
		for _, d := range ds {
			for !tick.IsZero() && tick.Before(d.wall) {
				step(tick)
				tick = tick.Add(time.Second)
			}
			if tick.IsZero() {
				tick = d.wall
			}
			e.Add(d.source, d.rec, d.wall)
		}
		for range 7200 {
			tick = tick.Add(time.Second)
			step(tick)
		}
		return o, removed, sizes
	}
	want, _, _ := run(false)
	got, removed, sizes := run(true)
	compare(t, "expire_idle", want, got)
	if len(want.findings) < 20 {
		t.Fatalf("only %d findings", len(want.findings))
	}
	// Both servers were removed in the quiet gap and again at the end.
	if removed != 4 {
		t.Errorf("%d partitions removed, want 4 (two servers, twice)", removed)
	}
	// A server back after its partition was removed has a partition of
	// another Gen: the metrics carry the removed one's counts by it.
	for server, g := range gens {
		if len(g) != 2 {
			t.Errorf("%s: partitions of Gen %v, want two", server, g)
		}
	}
	if len(gens) != 2 {
		t.Errorf("partitions of %d servers seen, want 2", len(gens))
	}
	sawEmpty := false
	for _, n := range sizes {
		sawEmpty = sawEmpty || n == 0
	}
	if !sawEmpty {
		t.Errorf("the engine never held zero partitions during the quiet gap: %v", sizes)
	}

	t.Run("open_window_kept", func(t *testing.T) {
		e := detect.NewEngine(cfg, outcomeSink{newOutcome()})
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		r := &audit.Record{Call: &audit.Call{ID: "c1", Time: t0, Server: "generic", Tool: "save"},
			Ops: []audit.Op{{Kind: audit.OpWrite, Target: "doc", Status: audit.OpUncertain, Pending: true}}}
		e.Add("src", r, t0)
		now := t0.Add(2 * cfg.IdleTimeout)
		e.Tick(now)
		if got := e.ExpireIdle(now, cfg.IdleTimeout); len(got) != 0 {
			t.Fatalf("a partition with an uncertain write in its window was removed: %v", got)
		}
	})
}
